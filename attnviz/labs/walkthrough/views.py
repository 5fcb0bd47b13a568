"""What the Walkthrough page draws of a step: one head of its tensor, cut to a bounded window, as numbers or a
heatmap, and the captions beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from torch import Tensor

from attnviz.i18n.message import Text, concat, join, msg
from attnviz.labs.walkthrough.steps import FEATURES, FEATURES_BY_HEAD, HEAD_SCORES, HEAD_WEIGHTS, Step, Walkthrough
from attnviz.models.record import token_labels

# Display bounds: what one step sends to the browser, whatever the text's length.
VIEWS = ("auto", "numbers", "heatmap")
AUTO_TABLE_TOKENS = 12  # "auto" shows numbers up to this many tokens, heatmaps beyond
TABLE_ROWS, TABLE_COLS = 16, 12
HEATMAP_SIDE = 128  # 128 x 128 float32 cells: 64 kB a figure


def code_block(step: Step) -> Text:
    """Everything shown beside a step, as one block of Python: each piece under a comment naming it."""
    return join((concat(code.header(), "\n", code.text.rstrip()) for code in step.code), "\n\n")


def shapes_caption(step: Step) -> Text:
    """Markdown: each tensor the step produced with its shape, then the axes' names."""
    shapes = " · ".join(f"`{name}` {tuple(shape)}" for name, shape in step.shapes.items())
    return concat(shapes, ": ", step.axes)


def shows_numbers(view: str, n_tokens: int) -> bool:
    """Whether to draw tensors as tables of numbers ("numbers", or "auto" on a short text) or heatmaps."""
    if view not in VIEWS:
        raise ValueError(msg("walkthrough_lib.bad_view", view=repr(view), views=VIEWS))
    return view == "numbers" or (view == "auto" and n_tokens <= AUTO_TABLE_TOKENS)


@dataclass(frozen=True, eq=False)
class StepView:
    """The piece of one head of a step's tensor that the page draws.

    values: (rows, cols) float32; row_labels, col_labels: raw (unescaped) text;
    axes: what rows and columns are; weights: values are attention weights in
    [0, 1]; visible: bool (rows, cols), the cells a query may see, for weights;
    note: what was cut, "" when the matrix is whole.
    """

    values: Tensor
    row_labels: list[str]
    col_labels: list[str]
    axes: tuple[Text, Text]
    weights: bool
    visible: Tensor | None
    note: Text | str


def _window(start: int, size: int, total: int) -> tuple[int, int]:
    """``size`` items from ``start`` (moved back so they fit in ``total``)."""
    start = max(0, min(start, total - size))
    return start, min(total, start + size)


def step_view(step: Step, head: int, walk_: Walkthrough, *, numbers: bool) -> StepView:
    """One head of ``step``'s drawn tensor as a matrix, cut to TABLE_ROWS x TABLE_COLS (numbers) or HEATMAP_SIDE."""
    max_rows, max_cols = (TABLE_ROWS, TABLE_COLS) if numbers else (HEATMAP_SIDE, HEATMAP_SIDE)
    tensor = step.tensors[step.shown]
    matrix = tensor[0] if step.kind in (FEATURES_BY_HEAD, FEATURES) else tensor[0, head]  # (T, cols)
    T, width = matrix.shape
    rows = (0, min(T, max_rows))
    start = head * step.head_dim if step.kind == FEATURES_BY_HEAD else 0
    cols = _window(start, min(width, max_cols), width)
    labels = token_labels(walk_.tokens)
    if step.kind in (HEAD_SCORES, HEAD_WEIGHTS):
        col_labels, axes, col_noun = labels[cols[0] : cols[1]], ("query", "key"), "keys"
    elif step.kind == FEATURES_BY_HEAD:
        col_labels = [f"H{c // step.head_dim}·{c % step.head_dim}" for c in range(*cols)]
        axes, col_noun = ("token", "feature"), "features"
    else:
        col_labels, axes, col_noun = [str(c) for c in range(*cols)], ("token", "feature"), "features"
    row_noun, axes = axes[0], (msg(f"walkthrough_lib.axis_{axes[0]}"), msg(f"walkthrough_lib.axis_{axes[1]}"))
    cut = []
    if rows[1] < T:
        cut.append(msg(f"walkthrough_lib.cut_{row_noun}_rows", last=rows[1] - 1, total=T))
    if cols[1] - cols[0] < width:
        cut.append(msg(f"walkthrough_lib.cut_{col_noun}", first=cols[0], last=cols[1] - 1, total=width))
    visible = None
    if step.kind == HEAD_WEIGHTS and walk_.mask is not None:
        visible = walk_.mask[rows[0] : rows[1], cols[0] : cols[1]]
    return StepView(
        values=matrix[rows[0] : rows[1], cols[0] : cols[1]].float(),
        row_labels=labels[rows[0] : rows[1]],
        col_labels=col_labels,
        axes=axes,
        weights=step.kind == HEAD_WEIGHTS,
        visible=visible,
        note=msg("walkthrough_lib.showing", cut=join(cut, msg("walkthrough_lib.and"))) if cut else "",
    )


def view_title(step: Step, head: int) -> Text | str:
    """What a step's heatmap shows: one head of it, or (before the split and after the merge) whose columns."""
    if step.kind == FEATURES:
        return step.shown
    if step.kind == FEATURES_BY_HEAD:
        return msg("walkthrough_lib.view_from_head", shown=step.shown, head=f"H{head}")
    return f"{step.shown}, H{head}"


def view_table(view: StepView, decimals: int = 4) -> pd.DataFrame:
    """A view as a table of numbers: rows and columns labelled; −inf where a score was masked."""
    return pd.DataFrame(view.values.double().numpy(), index=view.row_labels, columns=view.col_labels).round(decimals)

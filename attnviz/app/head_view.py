"""One head drawn large: whole at full resolution when it fits, else pooled with a box-select zoom to any window
at full resolution and any query row (the Heads, Generation and Padding pages).

:func:`head_view` returns what it drew (:class:`DrawnHead`), so a page exports exactly that without reading the
view's widget state.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st
import torch
from torch import Tensor

from attnviz.app.widgets import plotly
from attnviz.core.token_display import plain_text
from attnviz.figures.base import HEATMAP_SIDE_PX, PAGE_WIDTH_PX, head_label, make_head_heatmap_figure
from attnviz.figures.heads import (
    make_pooled_head_figure,
    make_row_figure,
    make_value_weighted_heatmap_figure,
    make_value_weighted_row_figure,
)
from attnviz.i18n.translate import t
from attnviz.models.record import AttentionRecord, Head

# full-resolution windows under a pooled view, tokens a side (512 x 512 float32 weights is 1 MiB sent)
WINDOW_SIDES = (128, 256, 512)


@dataclass(frozen=True, eq=False)
class DrawnHead:
    """What :func:`head_view` drew: the rows and columns it shows at full resolution (the whole head when it fits),
    and on a long text the pooled map above them (``pooled``, by ``pool``: "max" or "mean")."""

    rows: tuple[int, int]
    cols: tuple[int, int]
    pooled: Tensor | None = None
    pool: str | None = None


def resolution_note(record: AttentionRecord) -> str:
    """What the large view shows, in words."""
    if record.full_view:
        return t("views.full_resolution", q_len=record.q_len, k_len=record.k_len)
    b = record.bin_size
    return t("views.pooled", q_len=record.q_len, q_cells=-(-record.q_len // b), k_cells=-(-record.k_len // b), b=b)


def show_token(record: AttentionRecord, key: str, index: int) -> None:
    """Move the view under ``key`` to token ``index`` (call before :func:`head_view` draws): the full-resolution
    window centred on it (both axes, so on a causal model the keys it sees lie beside it) and the one query row
    on it. A head drawn whole needs no moving."""
    if record.full_view or not 0 <= index < record.q_len:
        return
    side = int(st.session_state.get(f"{key}_side", WINDOW_SIDES[1]))
    st.session_state[f"{key}_q0"] = max(0, min(index - side // 2, record.q_len - side))
    st.session_state[f"{key}_k0"] = max(0, min(index - side // 2, record.k_len - side))
    st.session_state[f"{key}_row"] = index
    st.session_state.pop(f"{key}_row_auto", None)  # a row chosen: it no longer follows the window


def head_view(
    record: AttentionRecord,
    layer: int,
    head: Head,
    key: str,
    *,
    gamma: float = 1.0,
    labels: list[str] | None = None,
    title: str | None = None,
    max_side: int = HEATMAP_SIDE_PX[1],
    max_width: int = PAGE_WIDTH_PX,
    values: bool = False,
) -> DrawnHead:
    """One head drawn large: whole at full resolution when it fits, else pooled with a zoom to full resolution.

    ``values``: the full-resolution maps and the row are value-weighted, ‖α_ij · v_j W_O^h‖ (the record must
    have value norms); a long text's pooled map stays in raw weights (only those are pooled).

    Each map is at most ``max_side`` pixels a side and ``max_width`` wide, labels and colour bar included (a page
    that draws the head in a column asks for its width: :func:`attnviz.figures.base.column_width`).
    The one-query-row view follows the window's last row (a decoder's row 0 sees only itself) until the reader picks
    a row."""
    whole = None if labels else record.labels(full=True)  # whole tokens on hover where the axis labels are cut
    # the keys' labels: the source's tokens for cross-attention, else the queries' own
    k_all = labels if labels and not record.cross else record.key_labels()
    k_whole = whole if not record.cross else record.key_labels(full=True)
    cells = record.value_weighted if values else record.weights
    heatmap = make_value_weighted_heatmap_figure if values else make_head_heatmap_figure
    sink_column = _no_sink_column if values else with_sink_column  # a learned sink carries no value: 0 there
    labels = labels or record.labels()
    title = title or f"L{layer} {head_label(head)}"
    if record.full_view:
        weights, k_labels, mask, k_hover = sink_column(
            record, layer, head, (0, record.q_len), cells(layer, head), k_all, record.mask(layer), k_whole
        )
        fig = heatmap(
            weights,
            labels,
            k_labels,
            title=title,
            gamma=gamma,
            mask=mask,
            q_hover=whole,
            k_hover=k_hover,
            max_side=max_side,
            max_width=max_width,
        )
        plotly(fig, key=f"{key}_large")
        st.caption(resolution_note(record))
        return DrawnHead((0, record.q_len), (0, record.k_len))
    st.caption(resolution_note(record))
    kinds = {"max": t("views.pool_max"), "mean": t("views.pool_mean")}
    kind = st.radio(t("views.pooling"), list(kinds), key=f"{key}_pool", horizontal=True, format_func=kinds.get)
    pooled = record.pooled(layer, head, kind)
    if kind == "max":
        pooled_title = t("views.pooled_title_max", title=title)
    else:
        pooled_title = t("views.pooled_title_mean", title=title)
    fig = make_pooled_head_figure(
        pooled,
        record.bin_size,
        record.q_len,
        record.k_len,
        title=pooled_title,
        gamma=gamma,
        kind=kind,
        max_side=max_side,
        max_width=max_width,
    )
    event = plotly(fig, key=f"{key}_pooled", on_select="rerun", selection_mode=("box",))
    box = _selected_box(event)
    if box is not None and box != st.session_state.get(f"{key}_box"):  # a new selection moves the window once;
        st.session_state[f"{key}_box"] = box  # the inputs stay editable while it stays selected
        st.session_state[f"{key}_q0"] = min(box[0], record.q_len - 1)
        st.session_state[f"{key}_k0"] = min(box[1], record.k_len - 1)
    if f"{key}_side" not in st.session_state:
        st.session_state[f"{key}_side"] = WINDOW_SIDES[1]
    cols = st.columns(3)
    side = int(cols[2].select_slider(t("views.window"), WINDOW_SIDES, key=f"{key}_side", help=t("views.window_help")))
    forget = {
        "on_change": st.session_state.pop,
        "args": (f"{key}_box", None),
    }  # typing frees the box to be chosen again
    q0 = cols[0].number_input(
        t("views.queries_from"), 0, max(0, record.q_len - 1), key=f"{key}_q0", step=side // 2, **forget
    )
    k0 = cols[1].number_input(
        t("views.keys_from"), 0, max(0, record.k_len - 1), key=f"{key}_k0", step=side // 2, **forget
    )
    rows = (int(q0), min(record.q_len, int(q0) + side))
    cols_ = (int(k0), min(record.k_len, int(k0) + side))
    window, k_labels, mask, k_hover = sink_column(
        record,
        layer,
        head,
        rows,
        cells(layer, head, rows, cols_),
        k_all[cols_[0] : cols_[1]],
        record.mask(layer, rows, cols_),
        k_whole and k_whole[cols_[0] : cols_[1]],
    )
    fig = heatmap(
        window,
        labels[rows[0] : rows[1]],
        k_labels,
        title=t("views.window_title", title=title, q0=rows[0], q1=rows[1] - 1, k0=cols_[0], k1=cols_[1] - 1),
        gamma=gamma,
        mask=mask,
        q_hover=whole and whole[rows[0] : rows[1]],
        k_hover=k_hover,
        max_side=max_side,
        max_width=max_width,
    )
    plotly(fig, key=f"{key}_window")
    row_key, auto_key = f"{key}_row", f"{key}_row_auto"
    # the row follows the window while it holds the value last put there for it; one the reader (or a search) chose stays
    current = st.session_state.get(row_key)
    if current is None or current == st.session_state.get(auto_key) or current >= record.q_len:
        st.session_state[row_key] = st.session_state[auto_key] = default_row(rows)
    row = st.number_input(t("views.one_row"), 0, record.q_len - 1, key=row_key, help=t("views.one_row_help"))
    weights = cells(layer, head, (int(row), int(row) + 1), (0, record.k_len))[0]
    plotly(
        (make_value_weighted_row_figure if values else make_row_figure)(
            weights, k_all, visible=record.mask(layer, (int(row), int(row) + 1))[0], title=plain_text(labels[row])
        ),
        key=f"{key}_row_fig",
    )
    return DrawnHead(rows, cols_, pooled, kind)


def default_row(rows: tuple[int, int]) -> int:
    """The query row the one-row view shows until the reader picks one: the window's last (rows are [start, end)),
    the row there that sees the most keys under a causal mask, where row 0 sees only itself."""
    return max(rows[0], rows[1] - 1)


def with_sink_column(
    record: AttentionRecord,
    layer: int,
    head: Head,
    rows: tuple[int, int],
    weights: Tensor,
    k_labels: list[str],
    mask: Tensor,
    k_hover: list[str] | None,
) -> tuple[Tensor, list[str], Tensor, list[str] | None]:
    """A head's weights (rows, keys) with one more column, each row's weight on the learned sink, where the
    model has sinks (its rows then sum to 1 minus that share); unchanged otherwise."""
    sink = record.sink_weight(layer, head, rows)
    if sink is None:
        return weights, k_labels, mask, k_hover
    label = t("views.sink_column")
    weights = torch.cat([weights, sink[:, None].to(weights.dtype)], dim=1)
    mask = torch.cat([mask, torch.ones(mask.shape[0], 1, dtype=torch.bool)], dim=1)
    return weights, [*k_labels, label], mask, None if k_hover is None else [*k_hover, label]


def _no_sink_column(record, layer, head, rows, weights, k_labels, mask, k_hover):
    """The value-weighted maps' stand-in for :func:`with_sink_column`: unchanged (a sink's value is nothing)."""
    return weights, k_labels, mask, k_hover


def _selected_box(event) -> tuple[int, int] | None:
    """The top-left (query, key) of a box selection on a pooled view, in token positions."""
    try:
        box = event.selection.box[0]
    except (AttributeError, IndexError, KeyError, TypeError):
        return None
    xs, ys = box.get("x") or [], box.get("y") or []
    if not xs or not ys:
        return None
    return max(0, round(min(ys))), max(0, round(min(xs)))


def value_switch(record: AttentionRecord, key: str) -> bool:
    """The switch between raw weights and value-weighted attention (Kobayashi et al. 2020); True for the latter.

    A record without value norms gets one line saying why instead of the switch.
    """
    if not record.has_value_norms:
        st.caption(t("value_weighted.unavailable"))
        return False
    kinds = {"raw": t("value_weighted.raw"), "values": t("value_weighted.values")}
    kind = st.radio(t("value_weighted.switch"), list(kinds), key=key, horizontal=True, format_func=kinds.get)
    if kind != "values":
        return False
    st.caption(t("value_weighted.caption"))
    return True

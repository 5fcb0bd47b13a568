"""Every head as lines, for short texts: BertViz's model view with attnviz's exact hover and click-through.

Each head is a small panel, layers down and heads across: the text's tokens in a column on the left (the queries)
and again on the right (the keys), and a line from each query to each key it attends to, the darker the heavier.
On a short text that answers "which heads look where" at a glance, where a grid of heat maps needs a look at each
tile. Lines are drawn from the exact weights, grouped in :data:`LEVELS` shades of one colour (one Plotly trace a
shade, NaN between segments, float32, drawn as SVG paths), and only the heaviest :data:`MAX_SEGMENTS` of those of at least
:data:`MIN_WEIGHT`: the figure stays under a megabyte whatever the model (:func:`line_threshold` says where the
cut fell, and the page says it). Hovering a query token shows its exact heaviest weights; clicking it opens its
head, as a tile of the grid does (the same customdata: layer, head).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from attnviz.figures.base import PAGE_WIDTH_PX, head_label, hover_text
from attnviz.i18n.translate import t

MAX_TOKENS = 32  # the longest text drawn as lines: past that a panel is a solid block of lines
MAX_POINTS = 10_000  # query points (one per head and token, each with its hover): about 0.8 MB of hover text
MAX_SEGMENTS = 16_000  # lines drawn over all heads (about 0.5 MB of float32 coordinates, base64)
MIN_WEIGHT = 0.01  # a lighter line is invisible at the lightest shade
LEVELS = 6  # shades of the line colour, lightest to darkest
TOP_KEYS = 3  # weights listed in a query's hover
LINE_RGB = "31, 119, 180"
PANEL_GAP = 0.25  # between panels, in panel widths
COLUMN_INSET = (0.08, 0.92)  # the query and key columns, as fractions of a panel's width


@dataclass(frozen=True)
class Lines:
    """What the lines view draws: ``weights`` (n_layer, n_head, n_q, n_k) float32, 0 where masked; the lightest
    weight drawn (``threshold``), how many lines that draws and how many weights were at least :data:`MIN_WEIGHT`."""

    weights: np.ndarray
    threshold: float
    n_drawn: int
    n_visible: int


def most_tokens(n_layer: int, n_head: int) -> int:
    """The longest text drawn as lines for a model of ``n_layer`` x ``n_head`` heads (0: none, too many heads)."""
    return min(MAX_TOKENS, MAX_POINTS // max(1, n_layer * n_head))


def fits(n_tokens: int, n_layer: int, n_head: int) -> bool:
    """Whether a text of ``n_tokens`` is drawn as lines for a model of ``n_layer`` x ``n_head`` heads."""
    return 1 <= n_tokens <= most_tokens(n_layer, n_head)


def line_threshold(weights: np.ndarray, max_segments: int = MAX_SEGMENTS) -> Lines:
    """The weights drawn: every one of at least :data:`MIN_WEIGHT`, or the heaviest ``max_segments`` of them."""
    flat = weights.reshape(-1)
    visible = flat[flat >= MIN_WEIGHT]
    threshold = MIN_WEIGHT
    if visible.size > max_segments:
        threshold = float(np.partition(visible, visible.size - max_segments)[visible.size - max_segments])
    n_drawn = int((flat >= threshold).sum())
    return Lines(weights.astype(np.float32, copy=False), threshold, n_drawn, int(visible.size))


def _positions(n: int) -> np.ndarray:
    """Token rows within a panel, top (0) to bottom (1); one token sits in the middle."""
    return np.full(1, 0.5) if n == 1 else np.linspace(0.0, 1.0, n)


def make_lines_figure(lines: Lines, query_labels: list[str], key_labels: list[str]) -> go.Figure:
    """The lines view: a panel per head, layers down (L0 at the top) and heads across; hover and click as above."""
    weights = lines.weights
    n_layer, n_head, n_q, n_k = weights.shape
    step = 1.0 + PANEL_GAP
    left, right = COLUMN_INSET
    y_q, y_k = _positions(n_q), _positions(n_k)
    layer, head, q, k = np.nonzero(weights >= lines.threshold)
    w = weights[layer, head, q, k]
    x0, x1 = head * step + left, head * step + right
    ya, yb = -(layer * step + y_q[q]), -(layer * step + y_k[k])
    shade = np.minimum(((w - lines.threshold) / max(1e-12, 1.0 - lines.threshold) * LEVELS).astype(int), LEVELS - 1)
    fig = go.Figure()
    for level in range(LEVELS):
        chosen = shade == level
        if not chosen.any():
            continue
        n = int(chosen.sum())
        xs = np.full((n, 3), np.nan, dtype=np.float32)
        ys = np.full((n, 3), np.nan, dtype=np.float32)
        xs[:, 0], xs[:, 1], ys[:, 0], ys[:, 1] = x0[chosen], x1[chosen], ya[chosen], yb[chosen]
        alpha = 0.12 + 0.88 * (level + 1) / LEVELS
        fig.add_trace(
            go.Scatter(
                x=xs.reshape(-1),
                y=ys.reshape(-1),
                mode="lines",
                line={"color": f"rgba({LINE_RGB}, {alpha:.2f})", "width": 1.0 + level * 0.25},
                hoverinfo="skip",
                showlegend=False,
            )
        )
    fig.add_trace(_query_points(weights, query_labels, key_labels, step, left, y_q))
    return _layout(fig, n_layer, n_head, step)


def _query_points(
    weights: np.ndarray, query_labels: list[str], key_labels: list[str], step: float, left: float, y_q: np.ndarray
) -> go.Scatter:
    """A point per head and query token, carrying (layer, head) for a click and its heaviest weights on hover (the
    key tokens' column has no points of its own: the lines end there, and a query's hover names its keys)."""
    n_layer, n_head, n_q, n_k = weights.shape
    top = np.argsort(-weights, axis=-1, kind="stable")[..., : min(TOP_KEYS, n_k)]  # (L, H, Q, top)
    queries = [hover_text(label) for label in query_labels]
    keys = [hover_text(label) for label in key_labels]
    xs, ys, texts, custom = [], [], [], []
    for layer in range(n_layer):
        for head in range(n_head):
            for q in range(n_q):
                heaviest = ", ".join(
                    f"{keys[k]}: {weights[layer, head, q, k]:.5f}"
                    for k in top[layer, head, q]
                    if weights[layer, head, q, k] > 0
                )
                xs.append(head * step + left)
                ys.append(-(layer * step + y_q[q]))
                texts.append(f"{queries[q]} | {heaviest}")
                custom.append((layer, head))
    return go.Scatter(
        x=np.asarray(xs, dtype=np.float32),
        y=np.asarray(ys, dtype=np.float32),
        mode="markers",
        marker={"size": 5, "color": f"rgba({LINE_RGB}, 0.55)"},
        text=texts,
        customdata=custom,
        hovertemplate=t("lines.hover"),  # the words once; each point's text is its tokens and weights (ASCII but
        # the tokens, one line: Plotly's JSON writes "<" and any other character as six)
        showlegend=False,
    )


def _layout(fig: go.Figure, n_layer: int, n_head: int, step: float) -> go.Figure:
    width = PAGE_WIDTH_PX
    panel_px = (width - 80) / (n_head * step)
    panel_px = min(max(panel_px, 40.0), 160.0)
    height = int(n_layer * step * panel_px) + 90
    fig.update_layout(
        width=min(width, int(n_head * step * panel_px) + 80),
        height=height,
        margin={"l": 50, "r": 10, "t": 30, "b": 10},
        plot_bgcolor="white",
        dragmode=False,
        hoverlabel={"align": "left"},
        clickmode="event+select",
    )
    fig.update_xaxes(
        range=[-0.1, n_head * step - PANEL_GAP + 0.1],
        tickvals=[h * step + 0.5 for h in range(n_head)],
        ticktext=[head_label(h) for h in range(n_head)],
        side="top",
        showgrid=False,
        zeroline=False,
        fixedrange=True,
    )
    fig.update_yaxes(
        range=[-(n_layer * step - PANEL_GAP) - 0.05, 0.05],
        tickvals=[-(layer * step + 0.5) for layer in range(n_layer)],
        ticktext=[f"L{layer}" for layer in range(n_layer)],
        showgrid=False,
        zeroline=False,
        fixedrange=True,
    )
    return fig

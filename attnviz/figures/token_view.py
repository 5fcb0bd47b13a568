"""Figures for one token's attention: the text coloured by weight, and BertViz-style lines.

Both are sized for the wire. The coloured text sends each weight as one uint8
colour level (255 marks a masked cell, drawn grey), the exact weight once as
float32 for the hover, and each token's full text once, as the x category; the
cells show the text cut to :data:`CELL_CHARS`. The line view draws only the
weights above a threshold, batched into a few opacity levels per head.
"""

from __future__ import annotations

import itertools

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.colors import qualitative, sample_colorscale
from torch import Tensor

from attnviz.core.token_display import plain_text
from attnviz.figures.base import hover_text
from attnviz.i18n.translate import t, tr

CELL_CHARS = 12  # a token's text inside a cell is cut to this many characters, with an ellipsis
TEXT_TOKENS = 128  # beyond this many tokens the cells are too narrow for text: hover only
MASKED_LEVEL = 255  # the uint8 level of a masked cell; weights use 0..254
MASKED_COLOR = "#d4d4d4"
LINE_THRESHOLD = 0.02
LINE_LEVELS = (0.02, 0.1, 0.25, 0.5)  # lower edges of the opacity bands of the line view
HEAD_COLORS = qualitative.Plotly + qualitative.D3 + qualitative.Alphabet


def cell_text(text: str, limit: int = CELL_CHARS) -> str:
    """A token's text for a cell: cut to ``limit`` characters (the last an ellipsis), escaped for plotly."""
    return plain_text(text if len(text) <= limit else text[: limit - 1] + "…")


def axis_names(texts: list[str]) -> list[str]:
    """Unique, escaped full names "index text", one per token: categories, read on hover (long ones wrapped)."""
    return [hover_text(f"{i} {text}") for i, text in enumerate(texts)]


def clicked_token(selection) -> int | None:
    """The token a click on a coloured-text figure chose (its x category is "index text"); None if none."""
    try:
        return int(str(selection["selection"]["points"][0]["x"]).split(" ", 1)[0])
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def text_colorscale() -> list[list]:
    """Viridis over levels 0..254, grey at 255 (masked)."""
    top = (MASKED_LEVEL - 1) / MASKED_LEVEL
    levels = np.linspace(0.0, 1.0, 17)
    colors = sample_colorscale("Viridis", list(levels))
    return [[float(level * top), color] for level, color in zip(levels, colors, strict=True)] + [
        [(MASKED_LEVEL - 0.5) / MASKED_LEVEL, MASKED_COLOR],
        [1.0, MASKED_COLOR],
    ]


def quantize_text_weights(weights: Tensor) -> np.ndarray:
    """Weights in [0, 1] (NaN = masked) -> uint8 levels round(254 * w), 255 where masked."""
    w = weights.detach().float().cpu()
    levels = (w.nan_to_num(0.0).clamp(0.0, 1.0) * (MASKED_LEVEL - 1)).round().to(torch.uint8)
    return levels.masked_fill(w.isnan(), MASKED_LEVEL).numpy()


def make_coloured_text_figure(
    weights: Tensor,
    labels: list[str],
    focus: int | None = None,
    *,
    row_names: list[str] | None = None,
    title: str = "",
) -> go.Figure:
    """The text itself, each token's background its weight, one row per head (or per layer): CircuitsVis style.

    weights: (n_row, T), NaN where masked (drawn grey); labels: the T tokens' full
    text (cut in the cells, whole on hover); focus: the chosen token, outlined.
    """
    w = weights.detach().float().cpu()
    if w.ndim != 2 or w.shape[1] != len(labels):
        raise ValueError(f"weights {tuple(w.shape)} do not match (n_row, {len(labels)} labels)")
    n_row, n_tok = w.shape
    row_names = row_names or [f"H{h}" for h in range(n_row)]
    if len(row_names) != n_row:
        raise ValueError(f"{len(row_names)} row names for {n_row} rows")
    show_text = n_tok <= TEXT_TOKENS
    heatmap = go.Heatmap(
        z=quantize_text_weights(w),
        x=axis_names(labels),
        y=row_names,
        zmin=0,
        zmax=MASKED_LEVEL,
        colorscale=text_colorscale(),
        showscale=False,
        customdata=w.numpy().astype(np.float32),
        hovertemplate=t("token_view_fig.text_hover"),
        xgap=1,
        ygap=1,
    )
    if show_text:
        heatmap.update(
            text=[[cell_text(text) for text in labels]] * n_row, texttemplate="%{text}", textfont={"size": 11}
        )
    fig = go.Figure(heatmap)
    if show_text:  # clickable points over the cells: Streamlit's selection events come from points, not heatmaps
        names = axis_names(labels)
        fig.add_trace(
            go.Scatter(
                x=[name for _ in range(n_row) for name in names],
                y=[row for row in row_names for _ in range(n_tok)],
                mode="markers",
                marker={"symbol": "square", "size": 22, "opacity": 0},
                hoverinfo="none",  # "skip" would also drop the click
                showlegend=False,
            )
        )
    if focus is not None:
        fig.add_shape(
            type="rect",
            x0=focus - 0.5,
            x1=focus + 0.5,
            y0=-0.5,
            y1=n_row - 0.5,
            line={"color": "#e4572e", "width": 3},
        )
    fig.update_layout(
        title={"text": tr(title)},
        height=int(min(900, 90 + 30 * n_row)),
        plot_bgcolor=MASKED_COLOR,
        margin={"l": 10, "r": 10, "t": 40 if title else 10, "b": 10},
        xaxis={"type": "category", "showticklabels": not show_text, "tickangle": -60, "title": None},
        yaxis={"type": "category", "autorange": "reversed"},
    )
    return fig


def _segments(pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, 2) (query, key) pairs -> x, y arrays of lines from (0, -query) to (1, -key), NaN between lines."""
    n = len(pairs)
    x = np.tile(np.array([0.0, 1.0, np.nan], dtype=np.float32), n)
    y = np.full(3 * n, np.nan, dtype=np.float32)
    y[0::3], y[1::3] = -pairs[:, 0], -pairs[:, 1]
    return x, y


def make_line_view_figure(
    weights: Tensor,
    labels: list[str],
    heads_on: list[int] | None = None,
    *,
    focus: int | None = None,
    direction: str = "attends_to",
    threshold: float = LINE_THRESHOLD,
) -> go.Figure:
    """BertViz's head view: queries on the left, keys on the right, a line per weight, one colour per head.

    weights: (n_head, T, T), NaN where masked. Lines below ``threshold`` are not
    drawn; the rest fall into opacity bands (:data:`LINE_LEVELS`), one trace per
    head and band, grouped so that a head's legend entry toggles all its lines.
    ``heads_on`` are drawn at first (default: all); ``focus`` keeps only the lines
    of one token (its row for "attends_to", its column for "attended_by").
    """
    w = weights.detach().float().cpu()
    if w.ndim != 3 or w.shape[1:] != (len(labels), len(labels)):
        raise ValueError(f"weights {tuple(w.shape)} do not match (n_head, {len(labels)}, {len(labels)})")
    n_head, n_tok = w.shape[0], len(labels)
    heads_on = list(range(n_head)) if heads_on is None else heads_on
    if focus is not None:
        keep = torch.zeros(n_tok, n_tok, dtype=torch.bool)
        if direction == "attends_to":
            keep[focus, :] = True
        else:
            keep[:, focus] = True
        w = w.masked_fill(~keep, float("nan"))
    edges = [max(threshold, LINE_LEVELS[0]), *LINE_LEVELS[1:], float("inf")]
    fig = go.Figure()
    for head in range(n_head):
        color = HEAD_COLORS[head % len(HEAD_COLORS)]
        first = True
        for band, (low, high) in enumerate(itertools.pairwise(edges)):
            pairs = ((w[head] >= low) & (w[head] < high)).nonzero().numpy()  # (n, 2) (query, key)
            if not len(pairs):
                continue
            x, y = _segments(pairs)
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    mode="lines",
                    line={"color": color, "width": 1 + 1.5 * band},
                    opacity=0.25 + 0.25 * band,
                    name=f"H{head}",
                    legendgroup=f"H{head}",
                    showlegend=first,
                    visible=True if head in heads_on else "legendonly",
                    hoverinfo="skip",
                )
            )
            first = False
        if first:  # no line above the threshold: keep the legend entry so the head can still be toggled
            fig.add_trace(
                go.Scatter(
                    x=[np.nan],
                    y=[np.nan],
                    mode="lines",
                    line={"color": color},
                    name=f"H{head}",
                    legendgroup=f"H{head}",
                    visible=True if head in heads_on else "legendonly",
                    hoverinfo="skip",
                )
            )
    positions = -np.arange(n_tok, dtype=np.float32)
    names = axis_names(labels)
    shown = [cell_text(text) for text in labels]
    sides = ((0.0, "middle left", t("token_view_fig.query")), (1.0, "middle right", t("token_view_fig.key")))
    for side, (x, anchor, role) in enumerate(sides):
        fig.add_trace(
            go.Scatter(
                x=np.full(n_tok, x, dtype=np.float32),
                y=positions,
                mode="text+markers",
                marker={"size": 4, "color": "#444"},
                text=shown,
                textposition=anchor,
                customdata=names,
                hovertemplate=f"{role} %{{customdata}}<extra></extra>",
                name=t("token_view_fig.queries") if side == 0 else t("token_view_fig.keys"),
                showlegend=False,
            )
        )
    if focus is not None:
        fig.add_shape(
            type="rect",
            x0=-0.02 if direction == "attends_to" else 0.98,
            x1=0.02 if direction == "attends_to" else 1.02,
            y0=-focus - 0.4,
            y1=-focus + 0.4,
            line={"color": "#e4572e", "width": 2},
        )
    fig.update_layout(
        height=int(min(1400, 120 + 20 * n_tok)),
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        plot_bgcolor="white",
        xaxis={"visible": False, "range": [-0.6, 1.6]},
        yaxis={"visible": False, "range": [-n_tok + 0.5, 0.5]},
        legend={"title": {"text": t("token_view_fig.heads_legend")}},
    )
    return fig

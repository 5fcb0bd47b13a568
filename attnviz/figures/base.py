"""What every attention figure shares: one colour mapping for weights, the masked grey, hover text and one head's heatmap.

Payload matters as much as pixels: 12 heads of 512x512 sent as float64 JSON
is 37 MB and takes seconds to draw. So each figure sends only what it needs:

- the selected head (or the mean over heads) as one float32 heatmap, which
  keeps the exact weight on hover (1 MiB binary for 512x512);
- the layer x head grid as one uint8 mosaic of max-pooled thumbnails (masked
  bins at a grey level of their own), a few hundred kB however many heads
  there are, under an invisible one-cell-per-tile heatmap for hover and clicks.

Both use one colour mapping: a weight ``w`` gets the Viridis colour at
``w ** gamma`` (gamma 1 is linear, 0.5 lifts small weights on long inputs).
Masked cells (may-not-attend) are NaN and show as the grey plot background.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.colors import sample_colorscale
from torch import Tensor

from attnviz.core.token_display import plain_text
from attnviz.i18n.translate import t, tr
from attnviz.models.record import Head


def head_label(head: Head, short: bool = False) -> str:
    """How a head is named everywhere: "H3", or "mean over heads" ("mean" where room is short, as a grid column)."""
    if head == "mean":
        return t("record.mean_short") if short else t("record.mean_over_heads")
    return f"H{head}"


HOVER_LINE_CHARS = 60  # user text in a hover box is wrapped at this many characters a line
HOVER_LINES = 10  # and shown on at most this many lines: Plotly drops a hover box taller than the plot


def hover_text(text: str, width: int = HOVER_LINE_CHARS, lines: int = HOVER_LINES) -> str:
    """User text for a Plotly hover box (a category or a constant in a hovertemplate).

    Markup is escaped, and so is ``%`` (``%{z}`` typed by a user is not a template
    variable); the text is wrapped every ``width`` characters, and past ``lines``
    lines the rest is counted, not shown.
    """
    shown = [
        plain_text(text[i : i + width]).replace("%", "&#37;") for i in range(0, min(len(text), width * lines), width)
    ]
    if len(text) > width * lines:
        shown.append(t("record.more_characters", n=len(text) - width * lines))
    return "<br>".join(shown)


BASE_SCALE = "Viridis"
MASKED_COLOR = "#d4d4d4"
N_STOPS = 33


def cell_hover(query: str = "%{y}", key: str = "%{x}") -> str:
    """A weight cell's hovertemplate in the session's language: its query, its key and the weight."""
    return t("figures.hover_cell", query=query, key=key)


def as_tensor(x: Tensor | np.ndarray) -> Tensor:
    return x if isinstance(x, Tensor) else torch.as_tensor(x)


# Streamlit's Plotly theme reads colours "#000001" to "#000040" as placeholders for its own palette (magma's
# black end, "#000004", turns pink on the page): a scale that holds one is written in rgb() instead
_THEME_PLACEHOLDER = re.compile(r"^#0000([0-9a-fA-F]{2})$")


def page_safe_colorscale(name: str) -> list[list]:
    """A named Plotly colour scale as explicit stops, none of which Streamlit's theme replaces on the page."""
    stops = go.Heatmap(colorscale=name).colorscale  # ((position, colour), ...)
    safe = []
    for position, color in stops:
        found = _THEME_PLACEHOLDER.match(color)
        safe.append([float(position), f"rgb(0,0,{int(found.group(1), 16)})" if found else color])
    return safe


def weight_colorscale(gamma: float = 1.0) -> list[list]:
    """Colour stops over raw weights in [0, 1] that give weight w the base colour at w**gamma."""
    if gamma <= 0:
        raise ValueError(f"gamma ({gamma}) must be positive")
    levels = np.linspace(0.0, 1.0, N_STOPS)
    colors = sample_colorscale(BASE_SCALE, list(levels))
    return [[float(level ** (1.0 / gamma)), color] for level, color in zip(levels, colors, strict=True)]


def weight_colorbar(gamma: float = 1.0) -> dict:
    """A colour bar labelled in weights, for any gamma."""
    # under √ the low ticks crowd together at the bottom: keep ones at least ~0.1 apart once drawn
    ticks = [0.0, 0.01, 0.05, 0.25, 0.5, 1.0] if gamma < 1 else [0.0, 0.25, 0.5, 0.75, 1.0]
    return {
        "title": {"text": t("figures.weight")},
        "tickvals": ticks,
        "ticktext": [f"{tick:g}" for tick in ticks],
        "thickness": 14,
        "len": 1.0,  # the plot's height, never more: a figure sized to its plot keeps the bar beside it
        "lenmode": "fraction",
    }


MODEBAR_PX = 28  # Plotly's toolbar, drawn over the figure's top right: a margin this tall keeps it off the labels
LABEL_PX = 16  # tick labels (one line of 12 px text, 14 px tall with its descenders) closer than this touch
# ... and labels slanted at -60° (the key axis on top): neighbours this far apart along the axis are LABEL_PX apart
# across their lines (the spacing times sin 60°)
SLANTED_LABEL_PX = math.ceil(LABEL_PX / math.sin(math.radians(60)))
HEATMAP_SIDE_PX = (320, 640)  # one head's plot area: at least, and at most, this many pixels a side
MAX_CELL_PX = 64  # a few tokens: cells up to this large, so 1 or 2 tokens do not fill the screen
COLORBAR_PX = 90  # the colour bar, its ticks and its title, right of the plot
# the width a page gives a figure: the main column of the wide layout in a 1,400-px window with the sidebar open
# (measured in Chromium), and the gap between two st.columns
PAGE_WIDTH_PX = 940
COLUMN_GAP_PX = 16


def column_width(spec: int | Sequence[float] = 1, which: int = 0, gap_px: int = COLUMN_GAP_PX) -> int:
    """Pixels the column ``which`` of ``st.columns(spec)`` gives a figure in the main column of a 1,400-px window
    (462 for either of two; ``gap_px`` 32 for ``gap="medium"``): a figure drawn in a column asks for no more (the
    ``max_width`` of :func:`make_head_heatmap_figure`)."""
    weights = [1.0] * spec if isinstance(spec, int) else [float(w) for w in spec]
    if not weights or min(weights) <= 0 or not 0 <= which < len(weights):
        raise ValueError(f"no column {which} in st.columns({spec!r})")
    return int((PAGE_WIDTH_PX - gap_px * (len(weights) - 1)) * weights[which] / sum(weights))


def heatmap_plot_size(n_q: int, n_k: int, max_side: int = HEATMAP_SIDE_PX[1]) -> tuple[int, int]:
    """(width, height) in pixels of a (n_q, n_k) heatmap's plot area with square cells: its longer side is
    ``max_side``, or less where cells would pass :data:`MAX_CELL_PX` (a few tokens), but at least
    ``HEATMAP_SIDE_PX[0]`` unless ``max_side`` is less."""
    longest = max(n_q, n_k, 1)
    side = min(max_side, max(HEATMAP_SIDE_PX[0], MAX_CELL_PX * longest))
    cell = side / longest
    return max(1, round(cell * n_k)), max(1, round(cell * n_q))


def fitted_side(
    left: int, max_side: int = HEATMAP_SIDE_PX[1], max_width: int = PAGE_WIDTH_PX, right: int = COLORBAR_PX
) -> int:
    """The longest plot side a heatmap may take: ``max_side``, or less where the figure (``left`` and ``right``
    margins around the plot) would be wider than ``max_width``, the width its page gives it."""
    return max(1, min(max_side, max_width - left - right))


TICK_STEPS = (1, 2, 5)  # label every 1, 2, 5, 10, 20, 50, ... tokens: positions a reader can count on


def thinned_ticks(labels: list[str], plot_px: float, label_px: float = LABEL_PX) -> dict:
    """Tick settings for a category axis of ``labels`` drawn over ``plot_px`` pixels: every label where each gets
    ``label_px`` pixels, else every k-th, with k the smallest of 2, 5, 10, 20, 50, … that leaves ``label_px``
    pixels a label, so labels never overlap (each is whole on hover)."""
    needed = len(labels) * label_px / max(plot_px, 1.0)
    step, scale = 1, 1
    while step < needed:
        step = next((s * scale for s in TICK_STEPS if s * scale >= needed), 10 * scale)
        scale *= 10
    shown = labels[::step]
    return {"tickmode": "array", "tickvals": shown, "ticktext": shown}


CJK = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef]")  # scripts written upright, never on their side


def upright_axis_titles(fig: go.Figure) -> go.Figure:
    """``fig`` with every vertical axis title that holds Chinese (or other CJK) text written horizontally.

    Plotly turns a y-axis title on its side, which lays Chinese characters down. Such a title becomes a horizontal
    label at the top of its axis: beside the plot's top corner when the x axis (its labels) sits on top, above the
    plot otherwise. A figure with no such title is returned as it is; else a copy is changed, never ``fig``.
    """
    names = [
        name
        for name in fig.layout
        if name.startswith("yaxis") and fig.layout[name].title.text and CJK.search(fig.layout[name].title.text)
    ]
    if not names:
        return fig
    fig = go.Figure(fig)
    top_x = fig.layout.xaxis.side == "top"
    for name in names:
        axis = fig.layout[name]
        anchor = axis.anchor if axis.anchor and axis.anchor != "free" else "x"
        x_domain = fig.layout["xaxis" + anchor[1:]].domain or (0.0, 1.0)
        right = axis.side == "right"
        outward = "left" if right else "right"  # away from the plot, into the margin beside it
        fig.add_annotation(
            text=axis.title.text,
            xref="paper",
            yref="paper",
            x=x_domain[1] if right else x_domain[0],
            y=(axis.domain or (0.0, 1.0))[1],
            xanchor=outward if top_x else ("right" if right else "left"),
            yanchor="bottom",
            xshift=(4 if right else -4) if top_x else 0,
            yshift=0 if top_x else 4,
            textangle=0,
            showarrow=False,
        )
        axis.title.text = None
    if not top_x:  # room above the plot for the titles
        t = fig.layout.margin.t
        fig.update_layout(margin={"t": max(80 if t is None else t, 50)})
    return fig


def fit_token_axes(
    fig: go.Figure,
    q_ticks: list[str],
    k_ticks: list[str],
    *,
    max_side: int = HEATMAP_SIDE_PX[1],
    max_width: int = PAGE_WIDTH_PX,
    right: int = COLORBAR_PX,
    bottom: int = 10,
) -> go.Figure:
    """Size a token x token heatmap (queries ``q_ticks`` down the side, keys ``k_ticks`` across the top, slanted):
    square cells, the longer side ``max_side`` (:func:`heatmap_plot_size`) or what ``max_width`` leaves beside the
    query labels and the ``right`` margin (a colour bar's :data:`COLORBAR_PX`, or a few pixels without one), as many
    labels as fit (:func:`thinned_ticks`). No ``scaleanchor``: in a window narrower than the page it was sized for,
    the browser narrows the plot and the colour bar stays as tall as the plot.

    Every heatmap of tokens is sized here, so they look alike on every page: ``fig`` is changed and returned.
    """
    longest = max((len(label) for label in (*q_ticks, *k_ticks)), default=1)
    left = min(220, 40 + 7 * longest)  # the query labels and the axis title
    top = min(170, 60 + MODEBAR_PX + round(6 * longest))  # the title, the toolbar and the key labels (at -60°)
    plot_w, plot_h = heatmap_plot_size(len(q_ticks), len(k_ticks), fitted_side(left, max_side, max_width, right))
    fig.update_layout(
        width=left + plot_w + right,
        height=top + plot_h + bottom,
        margin={"l": left, "r": right, "t": top, "b": bottom},
        xaxis=thinned_ticks(k_ticks, plot_w, SLANTED_LABEL_PX),
        yaxis=thinned_ticks(q_ticks, plot_h),
    )
    return fig


WHOLE_ON_HOVER = 32  # cut tokens (rows and columns each) that get their whole text on hover


def make_head_heatmap_figure(
    weights: Tensor | np.ndarray,
    q_labels: list[str],
    k_labels: list[str],
    *,
    title: str = "",
    gamma: float = 1.0,
    mask: Tensor | None = None,
    q_hover: list[str] | None = None,
    k_hover: list[str] | None = None,
    max_side: int = HEATMAP_SIDE_PX[1],
    max_width: int = PAGE_WIDTH_PX,
) -> go.Figure:
    """One head drawn large: weights (q_len, k_len), tokens on both axes, the weight on hover.

    The figure has a size of its own (:func:`heatmap_plot_size`: square cells, the longer side ``max_side``
    pixels, plus room for the labels and the colour bar), so its colour bar is as tall as its plot. The whole
    figure is at most ``max_width`` pixels wide: the page's width by default, :func:`column_width` for a figure in
    a column; the plot gives up what the labels need. The axes label every token where the labels fit side by side,
    else every k-th (:func:`thinned_ticks`).

    ``mask`` (bool, True = may attend, broadcastable to (q_len, k_len)) greys out the
    cells a query cannot see, such as the future under a causal mask.

    ``q_hover``/``k_hover`` are the labels whole, where the axis labels were cut short.
    The row (column) of each cut token is drawn again as a one-row heatmap of its
    own whose hover names the token whole, wrapped: a few kB a token, where a hover
    text per cell would cost the whole matrix. Plotly keeps thinning the axis labels
    to what fits and relabels them as the user zooms.
    """
    w = as_tensor(weights).detach().float().cpu()  # (q_len, k_len)
    if w.ndim != 2 or w.shape != (len(q_labels), len(k_labels)):
        raise ValueError(f"weights {tuple(w.shape)} do not match {len(q_labels)} x {len(k_labels)} labels")
    if mask is not None:
        w = w.masked_fill(~mask.cpu().expand(w.shape), float("nan"))
    z = w.numpy().astype(np.float32)
    q_ticks, k_ticks = [plain_text(x) for x in q_labels], [plain_text(x) for x in k_labels]
    cells = {"zmin": 0.0, "zmax": 1.0, "colorscale": weight_colorscale(gamma), "hoverongaps": False}
    fig = go.Figure(
        go.Heatmap(z=z, x=k_ticks, y=q_ticks, colorbar=weight_colorbar(gamma), hovertemplate=cell_hover(), **cells)
    )
    for axis, (cut, whole) in enumerate(((q_labels, q_hover), (k_labels, k_hover))):
        if whole is None or len(cut) < 2:
            continue
        for i in [i for i, (c, w) in enumerate(zip(cut, whole, strict=True)) if c != w][:WHOLE_ON_HOVER]:
            # two rows (the cut token's and a NaN neighbour): Plotly misplaces a one-row heatmap on a category axis
            pair = [i, i + 1 if i + 1 < len(cut) else i - 1]
            part = np.full((2, z.shape[1]) if axis == 0 else (z.shape[0], 2), np.nan, np.float32)
            if axis == 0:
                part[0] = z[i]
                where = {"x": k_ticks, "y": [q_ticks[p] for p in pair]}
                template = cell_hover(query=hover_text(whole[i]))
            else:
                part[:, 0] = z[:, i]
                where = {"x": [k_ticks[p] for p in pair], "y": q_ticks}
                template = cell_hover(key=hover_text(whole[i]))
            fig.add_trace(go.Heatmap(z=part, **where, hovertemplate=template, showscale=False, **cells))
    fig.update_layout(
        title={"text": tr(title), "y": 0.99, "yanchor": "top"},
        plot_bgcolor=MASKED_COLOR,
        xaxis={"title": {"text": t("figures.key_axis")}, "type": "category", "tickangle": -60, "side": "top"},
        yaxis={"title": {"text": t("figures.query_axis")}, "type": "category", "autorange": "reversed"},
    )
    fit_token_axes(fig, q_ticks, k_ticks, max_side=max_side, max_width=max_width)
    return fig

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
    }


def axis_height(n: int) -> int:
    return int(min(900, max(380, 160 + 14 * n)))


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
) -> go.Figure:
    """One head drawn large: weights (q_len, k_len), tokens on both axes, the weight on hover.

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
        height=axis_height(len(q_labels)) + 60,
        plot_bgcolor=MASKED_COLOR,
        margin={"l": 10, "r": 10, "t": 130, "b": 10},
        xaxis={"title": {"text": t("figures.key_axis")}, "type": "category", "tickangle": -60, "side": "top"},
        yaxis={"title": {"text": t("figures.query_axis")}, "type": "category", "autorange": "reversed"},
    )
    return fig

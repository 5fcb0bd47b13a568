"""Plotly figure builders for attention: pure functions from arrays to figures.

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

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
import torch.nn.functional as F
from plotly.colors import sample_colorscale
from torch import Tensor

from attnviz.i18n import t
from attnviz.parity import PARITY_TOLERANCE
from attnviz.record import Head, head_label
from attnviz.token_display import hover_text, plain_text

BASE_SCALE = "Viridis"
MASKED_COLOR = "#d4d4d4"
N_STOPS = 33


def cell_hover(query: str = "%{y}", key: str = "%{x}") -> str:
    """A weight cell's hovertemplate in the session's language: its query, its key and the weight."""
    return t("figures.hover_cell", query=query, key=key)


def _as_tensor(x: Tensor | np.ndarray) -> Tensor:
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


def _axis_height(n: int) -> int:
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
    w = _as_tensor(weights).detach().float().cpu()  # (q_len, k_len)
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
        title={"text": title, "y": 0.99, "yanchor": "top"},
        height=_axis_height(len(q_labels)) + 60,
        plot_bgcolor=MASKED_COLOR,
        margin={"l": 10, "r": 10, "t": 130, "b": 10},
        xaxis={"title": {"text": t("figures.key_axis")}, "type": "category", "tickangle": -60, "side": "top"},
        yaxis={"title": {"text": t("figures.query_axis")}, "type": "category", "autorange": "reversed"},
    )
    return fig


def quantize_weights(weights: Tensor, gamma: float = 1.0) -> np.ndarray:
    """Weights in [0, 1] -> uint8 colour levels round(255 * w**gamma)."""
    levels = weights.float().clamp(0.0, 1.0).pow(gamma) * 255.0
    return levels.round().to(torch.uint8).cpu().numpy()


def thumbnail(weights: Tensor, size: int) -> Tensor:
    """Max-pool (..., q_len, k_len) down to at most (..., size, size).

    Max (not mean) pooling, so a thin pattern such as a previous-token diagonal
    stays visible in a small tile.
    """
    q_len, k_len = weights.shape[-2:]
    if q_len <= size and k_len <= size:
        return weights
    lead = weights.shape[:-2]
    flat = weights.reshape(-1, 1, q_len, k_len).float()
    pooled = F.adaptive_max_pool2d(flat, (min(size, q_len), min(size, k_len)))
    return pooled.reshape(*lead, *pooled.shape[-2:])


def grid_tile_size(n_layer: int, n_col: int, seq_len: int) -> int:
    """Tile side in cells: small enough that the mosaic stays around 200k cells (about 270 kB sent)."""
    budget = int((200_000 / max(1, n_layer * n_col)) ** 0.5)
    return max(1, min(seq_len, 64, max(12, budget)))


MASKED_LEVEL = 255  # the grid's uint8 level for a bin with no visible cell; weights use levels 0..254
GRID_FLAGS = ("sink", "previous-token", "uniform", "saturated")
GRID_SHOW_ALL = "all heads"
DIM_COLOR = "rgba(255, 255, 255, 0.8)"


def grid_colorscale() -> list[list]:
    """Viridis over the weight levels 0..254 (level L gets the colour at L / 255) and grey at MASKED_LEVEL."""
    top = (MASKED_LEVEL - 1) / MASKED_LEVEL
    levels = np.linspace(0.0, top, N_STOPS)
    colors = sample_colorscale(BASE_SCALE, list(levels))
    stops = [[float(level), color] for level, color in zip(levels, colors, strict=True)]
    return [*stops, [(MASKED_LEVEL - 0.5) / MASKED_LEVEL, MASKED_COLOR], [1.0, MASKED_COLOR]]


def quantize_grid(mosaic: Tensor, gamma: float = 1.0) -> np.ndarray:
    """Pooled weights with NaN where masked -> uint8: weights as :func:`quantize_weights` (capped at 254), NaN as MASKED_LEVEL."""
    levels = np.minimum(quantize_weights(mosaic.nan_to_num(0.0), gamma), MASKED_LEVEL - 1)
    levels[mosaic.isnan().cpu().numpy()] = MASKED_LEVEL
    return levels


def grid_show_options(stat_columns: list[str] | tuple[str, ...]) -> list[str]:
    """What the grid can show: every head, the heads with one flag, or each layer's heads sorted by a statistic."""
    return [
        GRID_SHOW_ALL,
        *(f"only heads flagged {flag}" for flag in GRID_FLAGS),
        *(f"sorted by {s}" for s in stat_columns),
    ]


def grid_show_labels(options: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Each of :func:`grid_show_options` in the session's language, for a selectbox's ``format_func``
    (``labels.get``: the option values stay the English ones that links and session state keep)."""
    labels = {}
    for option in options:
        if option == GRID_SHOW_ALL:
            labels[option] = t("figures.show_all")
        elif option.startswith("only heads flagged "):
            labels[option] = t("figures.show_flagged", flag=option.removeprefix("only heads flagged "))
        elif option.startswith("sorted by "):
            labels[option] = t("figures.show_sorted", stat=option.removeprefix("sorted by "))
        else:
            labels[option] = option
    return labels


def grid_view(stats: pd.DataFrame, n_layer: int, n_head: int, show: str = GRID_SHOW_ALL) -> dict:
    """The per-head hover text (flags), order and shown heads that ``show`` asks of the grid.

    Returns ``{"flags": (n_layer, n_head) str, "order": (n_layer, n_head) int or None,
    "shown": (n_layer, n_head) bool or None}``: ``order[l, c]`` is the head drawn in column
    ``c`` (highest statistic first), ``shown`` is False for the heads a filter dims.
    """
    flags = np.full((n_layer, n_head), "", dtype=object)
    for row in stats.itertuples(index=False):
        flags[int(row.layer), int(row.head)] = row.flags or ""
    order = shown = None
    if show.startswith("only heads flagged "):
        flag = show.removeprefix("only heads flagged ")
        shown = np.array([[flag in str(f).split(", ") for f in row] for row in flags], dtype=bool)
    elif show.startswith("sorted by "):
        table = stats.pivot(index="layer", columns="head", values=show.removeprefix("sorted by "))
        values = table.reindex(index=range(n_layer), columns=range(n_head)).to_numpy(dtype=np.float64)
        order = np.argsort(-np.nan_to_num(values, nan=-np.inf), axis=1, kind="stable")  # (n_layer, n_head)
    elif show != GRID_SHOW_ALL:
        raise ValueError(f"unknown grid view {show!r}")
    return {"flags": flags, "order": order, "shown": shown}


def selected_tile(event) -> tuple[int, Head] | None:
    """The (layer, head) of the grid tile a click selected, from the customdata :func:`make_head_grid_figure` puts on it."""
    try:
        selection = event["selection"] if isinstance(event, dict) else event.selection
        point = selection["points"][0]
        layer, head = point["customdata"][:2]
        return int(layer), head if head == "mean" else int(head)
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return None


def _pool_keeping_masked(maps: Tensor, tile: int) -> Tensor:
    """:func:`thumbnail` of maps with NaN where masked: a pooled cell is NaN only when every cell under it is."""
    pooled = thumbnail(maps.nan_to_num(-1.0), tile)
    return pooled.masked_fill(pooled < 0, float("nan"))


def make_head_grid_figure(
    maps: Tensor,
    *,
    mean: Tensor | None = None,
    gamma: float = 1.0,
    with_mean: bool = True,
    tile: int | None = None,
    flags: np.ndarray | None = None,
    order: np.ndarray | None = None,
    shown: np.ndarray | None = None,
    max_height: int | None = None,
) -> go.Figure:
    """The layer x head grid: maps (n_layer, n_head, q, k) -> one mosaic heatmap, and one hover point per tile.

    ``maps`` are full weights or a capture's pooled maps (NaN where masked, drawn
    grey). Each tile is one head, max-pooled to ``tile`` cells a side and sent as
    uint8. With ``with_mean`` a last column shows the mean over the layer's heads:
    ``mean`` (n_layer, q, k) when given (a capture's max-pooled mean), else the
    mean of ``maps``.

    An invisible scatter holds one point per tile (at its centre): its hover names the head
    and its ``flags`` (n_layer, n_head), and its customdata carries (layer, head),
    so a click opens the right head whatever the ``order`` (n_layer, n_head: the
    head drawn in each column). Heads where ``shown`` is False are dimmed.
    ``max_height`` shrinks the tiles so that a tall grid fits that many pixels.
    """
    if maps.ndim != 4:
        raise ValueError(f"maps must be (n_layer, n_head, q_len, k_len), got {tuple(maps.shape)}")
    n_layer, n_head, q_len, k_len = maps.shape
    order = np.tile(np.arange(n_head), (n_layer, 1)) if order is None else np.asarray(order)  # (L, H)
    if order.shape != (n_layer, n_head):
        raise ValueError(f"order {order.shape} must be (n_layer, n_head) = ({n_layer}, {n_head})")
    maps = maps[torch.arange(n_layer)[:, None], torch.as_tensor(order)]  # (L, H, q, k), heads in drawn order
    if with_mean:
        mean = maps.nanmean(dim=1) if mean is None else mean
        maps = torch.cat([maps, mean[:, None]], dim=1)  # (L, H + 1, q, k)
    n_col = maps.shape[1]
    tile = tile or grid_tile_size(n_layer, n_col, max(q_len, k_len, 1))
    tiles = _pool_keeping_masked(maps, tile)  # (L, n_col, th, tw)
    th, tw = tiles.shape[-2:]
    mosaic = tiles.permute(0, 2, 1, 3).reshape(n_layer * th, n_col * tw)  # (L * th, n_col * tw)
    z = quantize_grid(mosaic, gamma)
    heads: list[list[Head]] = [
        [int(h) for h in order[layer]] + (["mean"] if with_mean else []) for layer in range(n_layer)
    ]
    sorted_ = not np.array_equal(order, np.tile(np.arange(n_head), (n_layer, 1)))
    col_names = [f"#{c + 1}" if sorted_ else head_label(c) for c in range(n_head)]
    col_names += [head_label("mean", short=True)] if with_mean else []

    dimmed = t("figures.dimmed")

    def hover(layer: int, head: Head) -> str:
        text = f"L{layer} {head_label(head)}"
        if head != "mean" and flags is not None and flags[layer][head]:
            text += f"<br>{flags[layer][head]}"
        if head != "mean" and shown is not None and not shown[layer][head]:
            text += "<br>" + dimmed
        return text

    col_x = [c * tw + (tw - 1) / 2 for c in range(n_col)]
    fig = go.Figure(
        [
            go.Heatmap(z=z, zmin=0, zmax=MASKED_LEVEL, colorscale=grid_colorscale(), showscale=False, hoverinfo="skip"),
            go.Scatter(  # a scatter, not a heatmap: plotly selects scatter points on click, never heatmap cells
                x=[col_x[c] for _ in range(n_layer) for c in range(n_col)],
                y=[r * th + (th - 1) / 2 for r in range(n_layer) for _ in range(n_col)],
                customdata=[[layer, head] for layer in range(n_layer) for head in heads[layer]],
                text=[hover(layer, head) for layer in range(n_layer) for head in heads[layer]],
                hovertemplate="%{text}<extra></extra>",
                mode="markers",
                marker={"opacity": 0, "size": 1},
                selected={"marker": {"opacity": 0}},
                unselected={"marker": {"opacity": 0}},
                showlegend=False,
                xaxis="x2",
                name="tiles",
            ),
        ]
    )
    paths = [f"M{c * tw - 0.5},-0.5 V{n_layer * th - 0.5}" for c in range(1, n_col)]
    paths += [f"M-0.5,{r * th - 0.5} H{n_col * tw - 0.5}" for r in range(1, n_layer)]
    if paths:
        fig.add_shape(type="path", path=" ".join(paths), line={"color": "white", "width": 2}, layer="above")
    if shown is not None:
        dim = [
            f"M{c * tw - 0.5},{layer * th - 0.5} h{tw} v{th} h{-tw} Z"
            for layer in range(n_layer)
            for c in range(n_head)
            if not shown[layer][heads[layer][c]]
        ]
        if dim:
            fig.add_shape(type="path", path=" ".join(dim), fillcolor=DIM_COLOR, line={"width": 0}, layer="above")
    cell_px = max(18, min(90, 900 // max(n_col, 1)))
    if max_height is not None:
        cell_px = max(12, min(cell_px, (max_height - 80) // max(n_layer, 1)))
    ticks = {"tickvals": col_x, "ticktext": col_names, "showgrid": False, "zeroline": False}
    fig.update_layout(
        height=int(min(4000, 80 + n_layer * cell_px)),
        margin={"l": 10, "r": 10, "t": 30, "b": 30},
        hoverdistance=-1,  # the nearest tile centre answers anywhere on the tile (tiles are square)
        xaxis={**ticks, "side": "top", "constrain": "domain"},
        xaxis2={**ticks, "side": "bottom", "overlaying": "x", "matches": "x"},  # the head labels below a tall grid too
        yaxis={
            "tickvals": [r * th + (th - 1) / 2 for r in range(n_layer)],
            "ticktext": [f"L{layer}" for layer in range(n_layer)],
            "autorange": "reversed",
            "showgrid": False,
            "zeroline": False,
            "scaleanchor": "x",
            "scaleratio": 1,
        },
    )
    return fig


def make_head_stats_figure(stats: pd.DataFrame, metric: str) -> go.Figure:
    """One statistic for every head as a layer x head heatmap, flags on hover."""
    if metric not in stats.columns:
        raise ValueError(f"unknown statistic {metric!r}")
    table = stats.pivot(index="layer", columns="head", values=metric)  # (n_layer, n_head)
    flags = stats.pivot(index="layer", columns="head", values="flags").fillna("")
    fig = go.Figure(
        go.Heatmap(
            z=table.to_numpy(dtype=np.float32),
            x=[head_label(h) for h in table.columns],
            y=[f"L{layer}" for layer in table.index],
            customdata=flags.to_numpy(),
            colorscale="Cividis",
            colorbar={"title": {"text": metric}, "thickness": 14},
            hovertemplate="%{y} %{x}<br>" + metric + " %{z:.3f}<br>%{customdata}<extra></extra>",
            texttemplate="%{z:.2f}" if table.size <= 150 else None,
        )
    )
    fig.update_layout(
        height=int(min(900, 120 + 28 * len(table.index))),
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        yaxis={"autorange": "reversed", "type": "category"},
        xaxis={"type": "category", "side": "top"},
    )
    return fig


def make_padding_mask_figure(key_mask: Tensor, token_rows: list[list[str]]) -> go.Figure:
    """The batch's padding mask: key_mask (batch, T), True on real tokens; pads greyed, tokens written in."""
    keep = key_mask.to(torch.uint8).numpy()  # (batch, T)
    fig = go.Figure(
        go.Heatmap(
            z=keep,
            text=[[tok for tok in row] for row in token_rows],
            texttemplate="%{text}",
            zmin=0,
            zmax=1,
            colorscale=[[0.0, MASKED_COLOR], [0.5, MASKED_COLOR], [0.5, "#9ecae1"], [1.0, "#9ecae1"]],
            showscale=False,
            xgap=2,
            ygap=2,
            hovertemplate=t("figures.padding_hover"),
        )
    )
    fig.update_layout(
        height=int(min(600, 80 + 44 * len(token_rows))),
        margin={"l": 10, "r": 10, "t": 10, "b": 10},
        xaxis={"title": {"text": t("figures.position")}, "dtick": 1},
        yaxis={"autorange": "reversed", "dtick": 1, "title": {"text": t("figures.sentence")}},
    )
    return fig


def parity_colorscale(zmin: float, zmax: float, tolerance: float) -> list[list]:
    """Green below the tolerance, pale at it, red at ``zmax``, over log10 differences in [zmin, zmax]."""
    at = (np.log10(tolerance) - zmin) / (zmax - zmin)
    return [[0.0, "#1a9850"], [float(np.clip(at, 0.0, 1.0)), "#d9ef8b"], [1.0, "#d73027"]]


def make_parity_figure(max_abs_diff: Tensor, tolerance: float = PARITY_TOLERANCE) -> go.Figure:
    """Largest |ours - model| for every head: (n_layer, n_head) on a log colour scale.

    The scale runs from 1e-12 to the worst difference (at least 1e-3), and the
    pale stop sits exactly at the tolerance whatever that top is.
    """
    diff = max_abs_diff.double().clamp_min(1e-12).log10().numpy()  # (n_layer, n_head)
    n_layer, n_head = diff.shape
    zmin, zmax = -12.0, max(-3.0, float(diff.max()))
    fig = go.Figure(
        go.Heatmap(
            z=diff.astype(np.float32),
            x=[head_label(h) for h in range(n_head)],
            y=[f"L{layer}" for layer in range(n_layer)],
            customdata=max_abs_diff.numpy().astype(np.float32),
            zmin=zmin,
            zmax=zmax,
            colorscale=parity_colorscale(zmin, zmax, tolerance),
            colorbar={"title": {"text": t("figures.log10_diff")}, "thickness": 14},
            hovertemplate=t("figures.parity_hover"),
        )
    )
    fig.update_layout(
        height=int(min(900, 120 + 22 * n_layer)),
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        yaxis={"autorange": "reversed", "type": "category"},
        xaxis={"type": "category", "side": "top"},
    )
    return fig


def _bin_centres(n_bins: int, bin_size: int, length: int) -> np.ndarray:
    """Token-index centre of each pooled bin, so a bin spans its tokens on a numeric axis."""
    starts = np.arange(n_bins) * bin_size
    ends = np.minimum(starts + bin_size, length) - 1
    return ((starts + ends) / 2).astype(np.float32)


def make_pooled_head_figure(
    pooled: Tensor,
    bin_size: int,
    q_len: int,
    k_len: int,
    *,
    title: str = "",
    gamma: float = 1.0,
    kind: str = "max",
) -> go.Figure:
    """A long head at display resolution: pooled (P, Pk) -> heatmap on token-index axes.

    Each cell covers ``bin_size`` x ``bin_size`` tokens and shows their max (or
    mean) weight; NaN cells (nothing visible) are grey. The axes are token
    indices, so a box selection reads directly as a range of queries and keys.
    """
    z = pooled.float().cpu().numpy().astype(np.float32)  # (P, Pk)
    if kind == "max":
        hover = t("figures.pooled_hover_max", b=bin_size)
    else:
        hover = t("figures.pooled_hover_mean", b=bin_size)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=_bin_centres(z.shape[1], bin_size, k_len),
            y=_bin_centres(z.shape[0], bin_size, q_len),
            zmin=0.0,
            zmax=1.0,
            colorscale=weight_colorscale(gamma),
            colorbar=weight_colorbar(gamma),
            hovertemplate=hover,
            hoverongaps=False,
        )
    )
    fig.update_layout(
        title={"text": title, "y": 0.99, "yanchor": "top"},
        height=720,
        plot_bgcolor=MASKED_COLOR,
        dragmode="select",
        margin={"l": 10, "r": 10, "t": 60, "b": 10},
        xaxis={
            "title": {"text": t("figures.key_position")},
            "side": "top",
            "range": [-0.5, k_len - 0.5],
            "constrain": "domain",
        },
        yaxis={
            "title": {"text": t("figures.query_position")},
            "range": [q_len - 0.5, -0.5],
            "scaleanchor": "x",
            "constrain": "domain",
        },
    )
    return fig


def make_row_figure(weights: Tensor, labels: list[str], *, visible: Tensor | None = None, title: str = "") -> go.Figure:
    """One query row at full resolution: weights (k_len,) over the keys, masked keys left out."""
    w = weights.float().cpu()
    if visible is not None:
        w = w.masked_fill(~visible.cpu(), float("nan"))
    fig = go.Figure(
        go.Scatter(
            x=np.arange(len(labels), dtype=np.int32),
            y=w.numpy().astype(np.float32),
            text=labels,
            mode="lines",
            line={"width": 1},
            fill="tozeroy",
            hovertemplate=t("figures.row_hover"),
        )
    )
    fig.update_layout(
        title={"text": title},
        height=320,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        xaxis={"title": {"text": t("figures.key_position")}},
        yaxis={"title": {"text": t("figures.weight")}, "rangemode": "tozero"},
    )
    return fig


COST_COLORS = {"naive": "#d62728", "fused": "#1f77b4", "chunked": "#2ca02c"}


def make_cost_figure(
    rows: list[dict],
    metric: str,
    titles: dict[str, str],
    *,
    predicted: list[tuple[int, float]] | None = None,
    limit: int | None = None,
) -> go.Figure:
    """Time or memory against n on log-log axes, one line per path.

    rows: {"path", "tokens", metric}; ``predicted`` draws the naive path's n² memory
    beyond what was run (dotted), and ``limit`` marks where it stops fitting.
    """
    fig = go.Figure()
    for path, title in titles.items():
        mine = sorted((r for r in rows if r["path"] == path), key=lambda r: r["tokens"])
        if mine:
            fig.add_trace(
                go.Scatter(
                    x=[r["tokens"] for r in mine],
                    y=[max(r[metric], 1e-3) for r in mine],
                    name=title,
                    mode="lines+markers",
                    line={"color": COST_COLORS.get(path)},
                )
            )
    if predicted:
        fig.add_trace(
            go.Scatter(
                x=[n for n, _ in predicted],
                y=[mb for _, mb in predicted],
                name=t("figures.cost_predicted"),
                mode="lines",
                line={"color": COST_COLORS["naive"], "dash": "dot"},
            )
        )
    if limit:
        fig.add_vline(x=limit, line={"color": COST_COLORS["naive"], "dash": "dash"})
        fig.add_annotation(
            x=math.log10(limit),
            y=0.02,
            yref="paper",
            text=t("figures.cost_limit", limit=limit),
            showarrow=False,
            xanchor="right",
            yanchor="bottom",
        )
    sizes = sorted({r["tokens"] for r in rows} | ({limit} if limit else set()))
    fig.update_layout(
        height=420,
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        xaxis={
            "type": "log",
            "title": {"text": t("figures.cost_tokens")},
            "tickvals": sizes,
            "ticktext": [f"{n:,}" for n in sizes],
        },
        yaxis={
            "type": "log",
            "dtick": 1,
            "title": {"text": t("figures.cost_seconds") if metric == "seconds" else t("figures.cost_memory")},
        },
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def make_tiling_figure(steps: list, exact: Tensor) -> go.Figure:
    """Online softmax on one query row: each key block's scores, and the running max and normaliser after it.

    exact: (k_len,) the row's weights from a plain softmax; the tiled result's
    weights exp(s - m) / l use the final m and l and land on it exactly.
    """
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=(t("figures.tiling_scores"), t("figures.tiling_weights")),
    )
    m_final, l_final = steps[-1].m, steps[-1].l
    for i, step in enumerate(steps):
        keys = list(range(*step.block))
        fig.add_trace(
            go.Bar(
                x=keys,
                y=step.scores.numpy().astype(np.float32),
                name=t("figures.tiling_block", i=i, m=step.m, l=step.l),
                hovertemplate=t("figures.tiling_score_hover"),
            ),
            row=1,
            col=1,
        )
        tiled = torch.exp(step.scores - m_final) / l_final
        fig.add_trace(
            go.Bar(
                x=keys,
                y=tiled.numpy().astype(np.float32),
                showlegend=False,
                hovertemplate=t("figures.tiling_weight_hover"),
            ),
            row=2,
            col=1,
        )
    fig.add_trace(
        go.Scatter(
            x=list(range(len(exact))),
            y=exact.numpy().astype(np.float32),
            mode="lines+markers",
            name=t("figures.plain_softmax"),
            line={"color": "black"},
        ),
        row=2,
        col=1,
    )
    fig.update_layout(
        height=520,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        barmode="overlay",
        legend={"orientation": "h", "y": -0.12},
    )
    return fig


SCALE_COLORS = {"sqrt_dk": "#2ca02c", "none": "#d62728", "sqrt_dmodel": "#1f77b4"}


def make_scaling_overview_figure(table: pd.DataFrame, stat: str, titles: dict[str, str]) -> go.Figure:
    """One layer x head heatmap per scale, side by side on one colour scale: ``stat`` is entropy_norm or
    saturated_share, read from columns ``{stat}_{kind}``."""
    from plotly.subplots import make_subplots

    kinds = list(titles)
    fig = make_subplots(rows=1, cols=len(kinds), subplot_titles=[titles[k] for k in kinds], horizontal_spacing=0.04)
    for i, kind in enumerate(kinds):
        grid = table.pivot(index="layer", columns="head", values=f"{stat}_{kind}")  # (n_layer, n_head)
        fig.add_trace(
            go.Heatmap(
                z=grid.to_numpy(dtype=np.float32),
                x=[head_label(h) for h in grid.columns],
                y=[f"L{layer}" for layer in grid.index],
                zmin=0.0,
                zmax=1.0,
                colorscale="Cividis",
                showscale=i == len(kinds) - 1,
                colorbar={"title": {"text": stat}, "thickness": 14},
                hovertemplate="%{y} %{x}<br>" + stat + " %{z:.3f}<extra>" + titles[kind] + "</extra>",
            ),
            row=1,
            col=i + 1,
        )
    n_layer = table["layer"].nunique()
    fig.update_layout(height=int(min(900, 140 + 22 * n_layer)), margin={"l": 10, "r": 10, "t": 40, "b": 10})
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category", side="bottom")
    return fig


# labels on a log axis: 1, 2, 5 in each decade (plotly's own minor labels crowd into each other)
LOG_TICKS = [m * 10.0**e for e in range(-3, 5) for m in (1, 2, 5)]


def make_variance_figure(random: pd.DataFrame) -> go.Figure:
    """Var(q·k) of random unit-variance vectors against d_k, unscaled and scaled, beside y = d_k."""
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=random["d_k"],
            y=random["var_unscaled"],
            name=t("scaling_fig.var_unscaled"),
            mode="lines+markers",
            line={"color": SCALE_COLORS["none"]},
        )
    )
    fig.add_trace(
        go.Scatter(
            x=random["d_k"],
            y=random["var_scaled"],
            name="Var(q·k / √d_k)",
            mode="lines+markers",
            line={"color": SCALE_COLORS["sqrt_dk"]},
        )
    )
    # drawn last, over the measured line it should match
    fig.add_trace(go.Scatter(x=random["d_k"], y=random["d_k"], name="y = d_k", line={"dash": "dash", "color": "black"}))
    fig.update_layout(
        height=360,
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        xaxis={"type": "log", "title": {"text": "d_k"}, "tickvals": list(random["d_k"])},
        yaxis={"type": "log", "dtick": 1, "title": {"text": t("scaling_fig.variance")}},
        legend={"orientation": "h", "y": -0.25},
    )
    return fig


def make_layer_variance_figure(layers: pd.DataFrame, head_dim: int) -> go.Figure:
    """The model's real Var(q·k) per layer, as a multiple of d_k (1 for unit-variance q and k), and after 1/√d_k."""
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=[f"L{layer}" for layer in layers["layer"]],
            y=layers["ratio_to_dk"],
            name=f"Var(q·k) / d_k (d_k = {head_dim}) = Var(q·k / √d_k)",
            marker={"color": SCALE_COLORS["sqrt_dk"]},
            hovertemplate="%{x}: Var(q·k)/d_k = %{y:.2f}<extra></extra>",
        )
    )
    fig.add_hline(y=1.0, line={"dash": "dot", "color": "grey"})
    fig.update_layout(
        height=320,
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        xaxis={"title": {"text": t("scaling_fig.layer")}},
        yaxis={"type": "log", "title": {"text": "Var(q·k) / d_k"}, "tickvals": LOG_TICKS, "showgrid": True},
        legend={"orientation": "h", "y": -0.3},
    )
    return fig


def make_gradient_figure(curve, markers: dict[str, float], titles: dict[str, str]) -> go.Figure:
    """The softmax's gradient against the scale (multiples of 1/√d_k): Jacobian norm, gradient to q, vanishing rows."""
    from plotly.subplots import make_subplots

    fig = make_subplots(specs=[[{"secondary_y": True}]])
    x = curve.multiples
    fig.add_trace(go.Scatter(x=x, y=curve.jacobian_norm, name=t("scaling_fig.jacobian"), mode="lines+markers"))
    fig.add_trace(go.Scatter(x=x, y=curve.grad_scores_norm, name=t("scaling_fig.grad_scores"), mode="lines"))
    fig.add_trace(go.Scatter(x=x, y=curve.grad_q_norm, name=t("scaling_fig.grad_q"), mode="lines"))
    fig.add_trace(
        go.Scatter(
            x=x,
            y=curve.vanishing_share,
            name=t("scaling_fig.vanishing"),
            mode="lines",
            line={"dash": "dash", "color": "black"},
        ),
        secondary_y=True,
    )
    for kind, multiple in markers.items():
        fig.add_vline(x=multiple, line={"color": SCALE_COLORS[kind], "dash": "dot"})
        fig.add_annotation(
            x=math.log10(multiple),
            y=1.0,
            yref="paper",
            text=titles[kind],
            showarrow=False,
            textangle=-90,
            xanchor="right",
            yanchor="top",
            font={"color": SCALE_COLORS[kind]},
        )
    fig.update_layout(height=400, margin={"l": 10, "r": 10, "t": 30, "b": 10}, legend={"orientation": "h", "y": -0.25})
    fig.update_xaxes(type="log", title={"text": t("scaling_fig.scale_axis")}, tickvals=LOG_TICKS)
    fig.update_yaxes(title={"text": t("scaling_fig.norm")}, secondary_y=False, rangemode="tozero")
    fig.update_yaxes(
        title={"text": t("scaling_fig.share_of_rows")},
        secondary_y=True,
        range=[0, 1.05],
        tickvals=[0, 0.25, 0.5, 0.75, 1],
        tickformat=".0%",
        showgrid=False,
    )
    return fig

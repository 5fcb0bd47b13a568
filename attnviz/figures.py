"""Plotly figure builders for attention: pure functions from arrays to figures.

Payload matters as much as pixels: 12 heads of 512x512 sent as float64 JSON
is 37 MB and takes seconds to draw. So each figure sends only what it needs:

- the selected head (or the mean over heads) as one float32 heatmap, which
  keeps the exact weight on hover (1 MiB binary for 512x512);
- the layer x head grid as one uint8 mosaic of max-pooled thumbnails, no hover,
  a few hundred kB however many heads there are.

Both use one colour mapping: a weight ``w`` gets the Viridis colour at
``w ** gamma`` (gamma 1 is linear, 0.5 lifts small weights on long inputs).
Masked cells (may-not-attend) are NaN and show as the grey plot background.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
import torch.nn.functional as F
from plotly.colors import sample_colorscale
from torch import Tensor

BASE_SCALE = "Viridis"
MASKED_COLOR = "#d4d4d4"
N_STOPS = 33
HOVER = "query %{y}<br>key %{x}<br>weight %{z:.5f}<extra></extra>"


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
    ticks = [0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0] if gamma < 1 else [0.0, 0.25, 0.5, 0.75, 1.0]
    return {"title": {"text": "weight"}, "tickvals": ticks, "ticktext": [f"{t:g}" for t in ticks], "thickness": 14}


def _axis_height(n: int) -> int:
    return int(min(900, max(380, 160 + 14 * n)))


def make_head_heatmap_figure(
    weights: Tensor | np.ndarray,
    q_labels: list[str],
    k_labels: list[str],
    *,
    title: str = "",
    gamma: float = 1.0,
    mask: Tensor | None = None,
) -> go.Figure:
    """One head drawn large: weights (q_len, k_len), tokens on both axes, the weight on hover.

    ``mask`` (bool, True = may attend, broadcastable to (q_len, k_len)) greys out the
    cells a query cannot see, such as the future under a causal mask.
    """
    w = _as_tensor(weights).detach().float().cpu()  # (q_len, k_len)
    if w.ndim != 2 or w.shape != (len(q_labels), len(k_labels)):
        raise ValueError(f"weights {tuple(w.shape)} do not match {len(q_labels)} x {len(k_labels)} labels")
    if mask is not None:
        w = w.masked_fill(~mask.cpu().expand(w.shape), float("nan"))
    fig = go.Figure(
        go.Heatmap(
            z=w.numpy().astype(np.float32),
            x=k_labels,
            y=q_labels,
            zmin=0.0,
            zmax=1.0,
            colorscale=weight_colorscale(gamma),
            colorbar=weight_colorbar(gamma),
            hovertemplate=HOVER,
            hoverongaps=False,
        )
    )
    fig.update_layout(
        title={"text": title, "y": 0.99, "yanchor": "top"},
        height=_axis_height(len(q_labels)) + 60,
        plot_bgcolor=MASKED_COLOR,
        margin={"l": 10, "r": 10, "t": 130, "b": 10},
        xaxis={"title": {"text": "key (attended to)"}, "type": "category", "tickangle": -60, "side": "top"},
        yaxis={"title": {"text": "query (attending)"}, "type": "category", "autorange": "reversed"},
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


def make_head_grid_figure(
    attention: Tensor,
    *,
    gamma: float = 1.0,
    with_mean: bool = True,
    tile: int | None = None,
) -> go.Figure:
    """The layer x head grid: attention (n_layer, n_head, q_len, k_len) -> one mosaic heatmap.

    Each tile is one head, max-pooled to ``tile`` cells a side and sent as uint8.
    With ``with_mean`` a last column shows the mean over the layer's heads.
    """
    if attention.ndim != 4:
        raise ValueError(f"attention must be (n_layer, n_head, q_len, k_len), got {tuple(attention.shape)}")
    n_layer, n_head, q_len, k_len = attention.shape
    if with_mean:
        attention = torch.cat([attention, attention.mean(dim=1, keepdim=True)], dim=1)  # (L, H + 1, q, k)
    n_col = attention.shape[1]
    tile = tile or grid_tile_size(n_layer, n_col, max(q_len, k_len, 1))
    tiles = thumbnail(attention, tile)  # (L, n_col, th, tw)
    th, tw = tiles.shape[-2:]
    mosaic = tiles.permute(0, 2, 1, 3).reshape(n_layer * th, n_col * tw)  # (L * th, n_col * tw)
    z = quantize_weights(mosaic, gamma)
    col_names = [f"H{h}" for h in range(n_head)] + (["mean"] if with_mean else [])
    fig = go.Figure(
        go.Heatmap(
            z=z,
            zmin=0,
            zmax=255,
            colorscale=BASE_SCALE,
            showscale=False,
            hoverinfo="skip",
        )
    )
    separators = " ".join(
        [f"M{c * tw - 0.5},-0.5 V{n_layer * th - 0.5}" for c in range(1, n_col)]
        + [f"M-0.5,{r * th - 0.5} H{n_col * tw - 0.5}" for r in range(1, n_layer)]
    )
    if separators:
        fig.add_shape(type="path", path=separators, line={"color": "white", "width": 2}, layer="above")
    cell_px = max(18, min(90, 900 // max(n_col, 1)))
    fig.update_layout(
        height=int(min(4000, 60 + n_layer * cell_px)),
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        xaxis={
            "tickvals": [c * tw + (tw - 1) / 2 for c in range(n_col)],
            "ticktext": col_names,
            "side": "top",
            "showgrid": False,
            "zeroline": False,
            "constrain": "domain",
        },
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
            x=[f"H{h}" for h in table.columns],
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
            hovertemplate="sentence %{y}, position %{x}: %{text}<extra></extra>",
        )
    )
    fig.update_layout(
        height=int(min(600, 80 + 44 * len(token_rows))),
        margin={"l": 10, "r": 10, "t": 10, "b": 10},
        xaxis={"title": {"text": "position"}, "dtick": 1},
        yaxis={"autorange": "reversed", "dtick": 1, "title": {"text": "sentence"}},
    )
    return fig


def make_parity_figure(max_abs_diff: Tensor, tolerance: float = 1e-5) -> go.Figure:
    """Largest |ours - model| for every head: (n_layer, n_head) on a log colour scale."""
    diff = max_abs_diff.double().clamp_min(1e-12).log10().numpy()  # (n_layer, n_head)
    n_layer, n_head = diff.shape
    fig = go.Figure(
        go.Heatmap(
            z=diff.astype(np.float32),
            x=[f"H{h}" for h in range(n_head)],
            y=[f"L{layer}" for layer in range(n_layer)],
            customdata=max_abs_diff.numpy().astype(np.float32),
            zmin=-12,
            zmax=max(-3.0, float(diff.max())),
            colorscale=[[0.0, "#1a9850"], [(np.log10(tolerance) + 12) / 9, "#d9ef8b"], [1.0, "#d73027"]],
            colorbar={"title": {"text": "log10 diff"}, "thickness": 14},
            hovertemplate="%{y} %{x}<br>max |ours − model| %{customdata:.2e}<extra></extra>",
        )
    )
    fig.update_layout(
        height=int(min(900, 120 + 22 * n_layer)),
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        yaxis={"autorange": "reversed", "type": "category"},
        xaxis={"type": "category", "side": "top"},
    )
    return fig

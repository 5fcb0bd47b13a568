"""The Heads page's figures: the layer x head grid (a uint8 mosaic with a hover layer), pooled maps of long
inputs, one query row, and a statistic per head."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
import torch.nn.functional as F
from plotly.colors import sample_colorscale
from torch import Tensor

from attnviz.figures.base import (
    BASE_SCALE,
    COLORBAR_PX,
    HEATMAP_SIDE_PX,
    MASKED_COLOR,
    MODEBAR_PX,
    N_STOPS,
    PAGE_WIDTH_PX,
    fitted_side,
    head_label,
    heatmap_plot_size,
    weight_colorbar,
    weight_colorscale,
)
from attnviz.i18n.catalogue import DEFAULT_LANGUAGE, catalogue
from attnviz.i18n.translate import t, tr
from attnviz.models.record import Head

SQRT_BY_ITSELF_TOKENS = 128  # longer inputs are coloured by √weight unless the user turns it off (most weights are
# tiny there, and a linear scale draws a dark square): the Heads page's toggle and the notebook's views


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


def stat_name(column: str) -> str:
    """A statistics table column (``entropy_norm``, ``layer``, ``flags`` …) named in the session's language; a
    column with no name of its own keeps its own."""
    key = f"stat_names.{column}"
    return t(key) if key in catalogue(DEFAULT_LANGUAGE) else column


def flag_names(flags: str) -> str:
    """A head's flags ("sink, uniform") in the session's language."""
    return ", ".join(t(f"flag_names.{flag}") if flag in GRID_FLAGS else flag for flag in flags.split(", ") if flag)


def stats_in_words(stats: pd.DataFrame) -> pd.DataFrame:
    """The statistics table as the reader sees it: its columns named and its flags written in the reader's language
    (the numbers unchanged)."""
    shown = stats.copy()
    if "flags" in shown.columns:
        shown["flags"] = shown["flags"].map(lambda f: flag_names(str(f or "")))
    return shown.rename(columns={c: stat_name(c) for c in shown.columns})


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
            labels[option] = t("figures.show_flagged", flag=flag_names(option.removeprefix("only heads flagged ")))
        elif option.startswith("sorted by "):
            labels[option] = t("figures.show_sorted", stat=stat_name(option.removeprefix("sorted by ")))
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


@dataclass(frozen=True, eq=False)
class HeadGrid:
    """The layer x head grid as drawn, whatever draws it (:func:`make_head_grid_figure`'s Plotly figure, or the
    canvas of :mod:`attnviz.figures.grid_picture`): one uint8 mosaic of every tile and what each tile is.

    ``levels`` is (n_layer * th, n_col * tw): tile (r, c) is ``levels[r*th:(r+1)*th, c*tw:(c+1)*tw]``, colour
    levels 0..254 for weights (:func:`quantize_grid`) and :data:`MASKED_LEVEL` where no cell is visible.
    ``heads[r][c]`` is the head drawn in column ``c`` of layer ``r`` ("mean" in the last column with the mean);
    ``hover[r][c]`` its lines of hover text; ``dimmed[r, c]`` whether a filter dims it. ``cell_px`` is a tile's
    side in pixels where the width allows, ``height`` the Plotly figure's height."""

    levels: np.ndarray
    th: int
    tw: int
    heads: list[list[Head]]
    hover: list[list[list[str]]]
    dimmed: np.ndarray
    col_names: list[str]
    cell_px: int
    height: int

    @property
    def n_layer(self) -> int:
        return len(self.heads)

    @property
    def n_col(self) -> int:
        return len(self.heads[0]) if self.heads else 0

    @property
    def tile_px(self) -> int:
        """A tile's side in the Plotly figure's plot: ``cell_px``, or less where the figure's height is capped."""
        return max(4, min(self.cell_px, (self.height - 80 - MODEBAR_PX) // max(self.n_layer, 1)))


def head_grid(
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
) -> HeadGrid:
    """The layer x head grid of maps (n_layer, n_head, q, k) (arguments as :func:`make_head_grid_figure`)."""
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
    heads: list[list[Head]] = [
        [int(h) for h in order[layer]] + (["mean"] if with_mean else []) for layer in range(n_layer)
    ]
    sorted_ = not np.array_equal(order, np.tile(np.arange(n_head), (n_layer, 1)))
    col_names = [f"#{c + 1}" if sorted_ else head_label(c) for c in range(n_head)]
    col_names += [head_label("mean", short=True)] if with_mean else []
    dimmed = np.array(
        [
            [head != "mean" and shown is not None and not shown[layer][head] for head in row]
            for layer, row in enumerate(heads)
        ],
        dtype=bool,
    ).reshape(n_layer, n_col)

    def hover(layer: int, head: Head) -> list[str]:
        lines = [f"L{layer} {head_label(head)}"]
        if head != "mean" and flags is not None and flags[layer][head]:
            lines.append(flag_names(flags[layer][head]))
        if head != "mean" and shown is not None and not shown[layer][head]:
            lines.append(t("figures.dimmed"))
        return lines

    cell_px = max(18, min(90, 900 // max(n_col, 1)))
    if max_height is not None:
        cell_px = max(12, min(cell_px, (max_height - 80 - MODEBAR_PX) // max(n_layer, 1)))
    return HeadGrid(
        levels=quantize_grid(mosaic, gamma),
        th=th,
        tw=tw,
        heads=heads,
        hover=[[hover(layer, head) for head in heads[layer]] for layer in range(n_layer)],
        dimmed=dimmed,
        col_names=col_names,
        cell_px=cell_px,
        height=int(min(4000, 80 + MODEBAR_PX + n_layer * cell_px)),
    )


def make_head_grid_figure(maps: Tensor, **options) -> go.Figure:
    """The layer x head grid: maps (n_layer, n_head, q, k) -> one mosaic heatmap, and one hover point per tile
    (``options`` as :func:`head_grid`: ``mean``, ``gamma``, ``with_mean``, ``tile``, ``flags``, ``order``,
    ``shown``, ``max_height``).

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
    return head_grid_figure(head_grid(maps, **options))


def head_grid_figure(grid: HeadGrid) -> go.Figure:
    """:class:`HeadGrid` as a Plotly figure (the grid's interactive HTML export, and its tests' reference)."""
    n_layer, n_col, th, tw = grid.n_layer, grid.n_col, grid.th, grid.tw
    col_x = [c * tw + (tw - 1) / 2 for c in range(n_col)]
    fig = go.Figure(
        [
            go.Heatmap(
                z=grid.levels,
                zmin=0,
                zmax=MASKED_LEVEL,
                colorscale=grid_colorscale(),
                showscale=False,
                hoverinfo="skip",
            ),
            go.Scatter(  # a scatter, not a heatmap: plotly selects scatter points on click, never heatmap cells
                x=[col_x[c] for _ in range(n_layer) for c in range(n_col)],
                y=[r * th + (th - 1) / 2 for r in range(n_layer) for _ in range(n_col)],
                customdata=[[layer, head] for layer in range(n_layer) for head in grid.heads[layer]],
                text=["<br>".join(lines) for row in grid.hover for lines in row],
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
    dim = [
        f"M{c * tw - 0.5},{layer * th - 0.5} h{tw} v{th} h{-tw} Z"
        for layer in range(n_layer)
        for c in range(n_col)
        if grid.dimmed[layer, c]
    ]
    if dim:
        fig.add_shape(type="path", path=" ".join(dim), fillcolor=DIM_COLOR, line={"width": 0}, layer="above")
    ticks = {"tickvals": col_x, "ticktext": grid.col_names, "showgrid": False, "zeroline": False}
    fig.update_layout(
        height=grid.height,
        margin={"l": 10, "r": 10, "t": 30 + MODEBAR_PX, "b": 30},  # the toolbar above the head labels, not on them
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
    flags = stats.pivot(index="layer", columns="head", values="flags").fillna("").map(flag_names)
    name = stat_name(metric)
    fig = go.Figure(
        go.Heatmap(
            z=table.to_numpy(dtype=np.float32),
            x=[head_label(h) for h in table.columns],
            y=[f"L{layer}" for layer in table.index],
            customdata=flags.to_numpy(),
            colorscale="Cividis",
            colorbar={"title": {"text": name, "side": "right"}, "thickness": 14},
            hovertemplate="%{y} %{x}<br>" + name + " %{z:.3f}<br>%{customdata}<extra></extra>",
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
    max_side: int = HEATMAP_SIDE_PX[1],
    max_width: int = PAGE_WIDTH_PX,
) -> go.Figure:
    """A long head at display resolution: pooled (P, Pk) -> heatmap on token-index axes.

    Each cell covers ``bin_size`` x ``bin_size`` tokens and shows their max (or
    mean) weight; NaN cells (nothing visible) are grey. The axes are token
    indices, so a box selection reads directly as a range of queries and keys.
    The figure is sized to a square plot of at most ``max_side`` pixels and ``max_width`` wide in all (the width
    its page or column gives), its colour bar as tall as the plot.
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
    left, top = 70, 90 + MODEBAR_PX  # position numbers and the axis title; the title, the toolbar, the key axis
    plot_w, plot_h = heatmap_plot_size(q_len, k_len, fitted_side(left, max_side, max_width))
    fig.update_layout(
        title={"text": tr(title), "y": 0.99, "yanchor": "top"},
        width=left + plot_w + COLORBAR_PX,
        height=top + plot_h + 10,
        plot_bgcolor=MASKED_COLOR,
        dragmode="select",
        margin={"l": left, "r": COLORBAR_PX, "t": top, "b": 10},
        xaxis={"title": {"text": t("figures.key_position")}, "side": "top", "range": [-0.5, k_len - 0.5]},
        yaxis={"title": {"text": t("figures.query_position")}, "range": [q_len - 0.5, -0.5]},
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
        title={"text": tr(title)},
        height=320,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        xaxis={"title": {"text": t("figures.key_position")}},
        yaxis={"title": {"text": t("figures.weight")}, "rangemode": "tozero"},
    )
    return fig


def make_value_weighted_heatmap_figure(
    mapped: Tensor, q_labels: list[str], k_labels: list[str], *, gamma: float = 1.0, **options
) -> go.Figure:
    """One head's value-weighted map ‖α_ij · v_j W_O^h‖ (q_len, k_len), drawn by the weights' own builder.

    :func:`attnviz.figures.base.make_head_heatmap_figure` draws weights in [0, 1]; here the colours run from 0
    to the largest value shown (``mask`` cells excluded) and the colour bar and hover say what the cells hold.
    ``options`` are that builder's (``title``, ``mask``, ``q_hover``, ``k_hover``, ``max_side``).
    """
    from attnviz.figures.base import make_head_heatmap_figure

    values = mapped.detach().float().cpu()
    mask = options.get("mask")
    shown = values if mask is None else values.masked_fill(~mask.cpu().expand(values.shape), 0.0)
    top = float(shown.nan_to_num(0.0).max()) if shown.numel() else 0.0
    top = top if top > 0 else 1.0
    fig = make_head_heatmap_figure(values / top, q_labels, k_labels, gamma=gamma, **options)
    bar = weight_colorbar(gamma)
    bar["title"] = {"text": t("value_weighted_fig.colorbar")}
    bar["tickvals"] = [tick * top for tick in bar["tickvals"]]
    bar["ticktext"] = [f"{tick:.3g}" for tick in bar["tickvals"]]
    for trace in fig.data:
        z = np.asarray(trace.z, dtype=np.float32) * np.float32(top)
        trace.update(z=z, zmax=top, hovertemplate=trace.hovertemplate.replace(t("figures.weight"), "‖α·v W_O‖"))
    fig.data[0].update(colorbar=bar)
    return fig


def make_value_weighted_row_figure(
    mapped: Tensor, labels: list[str], *, visible: Tensor | None = None, title: str = ""
) -> go.Figure:
    """One query row of the value-weighted map (k_len,), as :func:`make_row_figure` draws a row of weights."""
    fig = make_row_figure(mapped, labels, visible=visible, title=title)
    fig.data[0].update(hovertemplate=t("value_weighted_fig.row_hover"))
    fig.update_layout(yaxis={"title": {"text": t("value_weighted_fig.row_axis")}})
    return fig

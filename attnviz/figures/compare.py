"""Figures for side by side: a statistic's layer x head grid in A, in B and their difference, and the JSD grid.

Pure builders in the ``make_<thing>_figure(data, *, options) -> go.Figure`` form: they take what
:mod:`attnviz.labs.compare` returns and draw it. A and B share one colour scale, so the same colour is the same
value in both; the difference has a diverging scale centred at 0 (blue: lower in B, red: higher).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from attnviz.figures.base import head_label
from attnviz.figures.heads import stat_name
from attnviz.i18n.translate import t
from attnviz.labs.compare import Comparison

DIFF_SCALE = "RdBu_r"  # diverging: blue below 0, white at 0, red above
JSD_SCALE = "Magma_r"
TEXT_CELLS = 150  # cells written into the grid up to this many heads


def stat_grid(frame: pd.DataFrame, column: str, n_layer: int, n_head: int) -> np.ndarray:
    """One column of a (layer, head) table as a (n_layer, n_head) float array, NaN where a head has no value."""
    grid = np.full((n_layer, n_head), np.nan, dtype=np.float64)
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64)
    grid[frame["layer"].to_numpy(dtype=int), frame["head"].to_numpy(dtype=int)] = values
    return grid


def _limit(*grids: np.ndarray) -> tuple[float, float]:
    """The finite range of several grids ((0, 1) when none has a finite value)."""
    finite = np.concatenate([g[np.isfinite(g)] for g in grids])
    return (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)


def _heatmap(z: np.ndarray, name: str, **kwargs) -> go.Heatmap:
    n_layer, n_head = z.shape
    return go.Heatmap(
        z=z.astype(np.float32),
        x=[head_label(h) for h in range(n_head)],
        y=[f"L{layer}" for layer in range(n_layer)],
        hovertemplate="%{y} %{x}<br>" + name + " %{z:.4f}<extra></extra>",
        texttemplate="%{z:.2f}" if z.size <= TEXT_CELLS else None,
        **kwargs,
    )


def make_compare_stat_figure(comparison: Comparison, statistic: str) -> go.Figure:
    """Three layer x head grids of ``statistic``: A, B (one shared colour scale) and B − A (diverging, centred at 0).

    ValueError for a statistic the comparison does not hold. Where the heads differ in shape there is no
    difference: A and B are drawn, each at its own shape.
    """
    if statistic not in comparison.statistics:
        raise ValueError(f"unknown statistic {statistic!r}; known: {', '.join(comparison.statistics)}")
    a, b = comparison.a, comparison.b
    grid_a = stat_grid(a.statistics, statistic, a.n_layer, a.n_head)
    grid_b = stat_grid(b.statistics, statistic, b.n_layer, b.n_head)
    name = stat_name(statistic)
    titles = [t("compare_fig.side_a"), t("compare_fig.side_b")]
    if comparison.diff is not None:
        titles.append(t("compare_fig.difference"))
    fig = make_subplots(rows=1, cols=len(titles), subplot_titles=titles, horizontal_spacing=0.12)
    low, high = _limit(grid_a, grid_b)
    shared_bar_x = fig.layout.xaxis2.domain[1] + 0.01  # the shared scale stands right of B
    for col, grid in enumerate((grid_a, grid_b), start=1):
        fig.add_trace(
            _heatmap(
                grid,
                name,
                zmin=low,
                zmax=high,
                colorscale="Cividis",
                showscale=col == 1,
                colorbar={"title": {"text": name, "side": "right"}, "thickness": 12, "x": shared_bar_x},
            ),
            row=1,
            col=col,
        )
    if comparison.diff is not None:
        diff = stat_grid(comparison.diff, statistic, a.n_layer, a.n_head)
        lo, hi = _limit(diff)
        span = max(abs(lo), abs(hi)) or 1e-9
        fig.add_trace(
            _heatmap(
                diff,
                f"{name} (B − A)",
                zmin=-span,
                zmax=span,
                zmid=0.0,
                colorscale=DIFF_SCALE,
                colorbar={"title": {"text": "B − A", "side": "right"}, "thickness": 12, "x": 1.02},
            ),
            row=1,
            col=3,
        )
    n_layer = max(a.n_layer, b.n_layer)
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category", side="bottom")
    fig.update_layout(height=int(min(900, 160 + 26 * n_layer)), margin={"l": 10, "r": 10, "t": 40, "b": 10})
    return fig


def make_compare_jsd_figure(comparison: Comparison) -> go.Figure:
    """The patterns' Jensen–Shannon divergence per head over the aligned tokens, on a fixed [0, 1] scale (bits).

    ValueError where the heads were not compared (:attr:`Comparison.note` says why).
    """
    if comparison.jsd is None:
        raise ValueError("the heads were not compared: " + str(comparison.note))
    grid = stat_grid(comparison.jsd, "jsd", comparison.a.n_layer, comparison.a.n_head)
    counts = stat_grid(comparison.jsd, "n_queries", comparison.a.n_layer, comparison.a.n_head)
    heatmap = _heatmap(
        grid,
        "JSD",
        zmin=0.0,
        zmax=1.0,
        colorscale=JSD_SCALE,
        colorbar={"title": {"text": t("compare_fig.jsd_bits"), "side": "right"}, "thickness": 12},
        customdata=np.nan_to_num(counts, nan=0).astype(int),
    )
    heatmap.hovertemplate = "%{y} %{x}<br>JSD %{z:.4f}<br>" + t("compare_fig.queries") + " %{customdata}<extra></extra>"
    fig = go.Figure(heatmap)
    fig.update_layout(
        height=int(min(900, 140 + 26 * comparison.a.n_layer)),
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        yaxis={"autorange": "reversed", "type": "category"},
        xaxis={"type": "category", "side": "top"},
    )
    return fig


__all__ = ["make_compare_jsd_figure", "make_compare_stat_figure", "stat_grid"]

"""Figures for side by side: a statistic's layer x head grid in A, in B and their difference, the JSD grid, and
one head's pattern in A, in B and B − A.

Pure builders in the ``make_<thing>_figure(data, *, options) -> go.Figure`` form: they take what
:mod:`attnviz.labs.compare` returns and draw it. A and B share one colour scale, so the same colour is the same
value in both; the difference has a diverging scale centred at 0 (blue: lower in B, red: higher). The JSD grid's
scale runs from 0 to its largest value (:func:`jsd_scale`), not to the 1 bit no real pair of texts comes near:
typical values are a few hundredths, which a 0–1 scale draws as one pale block.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from attnviz.core.token_display import plain_text
from attnviz.figures.base import MASKED_COLOR, head_label, page_safe_colorscale, thinned_ticks, weight_colorscale
from attnviz.figures.heads import stat_name
from attnviz.i18n.translate import t
from attnviz.labs.compare import FLOAT_FLOOR, Comparison, HeadPair, Span, rounded
from attnviz.models.record import AttentionRecord

DIFF_SCALE = "RdBu_r"  # diverging: blue below 0, white at 0, red above
JSD_SCALE = page_safe_colorscale("Magma_r")  # magma ends at "#000004": see page_safe_colorscale
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


def jsd_scale(comparison: Comparison) -> tuple[float, float]:
    """The JSD grid's colour range in bits: 0 to the largest JSD, rounded up to 2 significant digits (0 to
    :data:`~attnviz.labs.compare.FLOAT_FLOOR` where every head is unmoved). ValueError where the heads were not
    compared."""
    if comparison.jsd is None:
        raise ValueError("the heads were not compared: " + str(comparison.note))
    values = comparison.jsd["jsd"].to_numpy(dtype=np.float64)
    top = float(np.nanmax(values)) if np.isfinite(values).any() else 0.0
    if top < FLOAT_FLOOR:
        return 0.0, FLOAT_FLOOR
    step = 10.0 ** (np.floor(np.log10(top)) - 1)  # 2 significant digits
    return 0.0, float(f"{min(1.0, np.ceil(top / step - 1e-9) * step):.2g}")


def make_compare_jsd_figure(comparison: Comparison, selected: tuple[int, int] | None = None) -> go.Figure:
    """The patterns' Jensen–Shannon divergence per head over the aligned tokens, in bits, on a colour scale from 0
    to the largest value (:func:`jsd_scale`; the colour bar's ends are labelled). ``selected`` (layer, head) is
    outlined. Each cell carries (layer, head, queries compared) as customdata, so a click names its head.

    ValueError where the heads were not compared (:attr:`Comparison.note` says why).
    """
    low, high = jsd_scale(comparison)
    n_layer, n_head = comparison.a.n_layer, comparison.a.n_head
    grid = stat_grid(comparison.jsd, "jsd", n_layer, n_head)
    counts = np.nan_to_num(stat_grid(comparison.jsd, "n_queries", n_layer, n_head), nan=0).astype(int)
    layers, heads = np.meshgrid(np.arange(n_layer), np.arange(n_head), indexing="ij")
    shown = np.where(np.abs(grid) < FLOAT_FLOOR, 0.0, grid)  # float rounding is no change
    ticks = [low, high / 2, high]
    heatmap = go.Heatmap(
        z=shown.astype(np.float32),
        x=[head_label(h) for h in range(n_head)],
        y=[f"L{layer}" for layer in range(n_layer)],
        zmin=low,
        zmax=high,
        colorscale=JSD_SCALE,
        colorbar={
            "title": {"text": t("compare_fig.jsd_bits"), "side": "right"},
            "thickness": 12,
            "tickvals": ticks,
            "ticktext": [f"{rounded(v):g}" for v in ticks],
        },
        customdata=np.stack([layers, heads, counts], axis=-1),
        hovertemplate="%{y} %{x}<br>JSD %{z:.3g} "
        + t("compare_fig.bits")
        + "<br>"
        + t("compare_fig.queries")
        + " %{customdata[2]}<extra></extra>",
        texttemplate="%{z:.2g}" if grid.size <= TEXT_CELLS else None,
        hoverongaps=False,
    )
    fig = go.Figure(heatmap)
    if selected is not None:
        layer, head = selected
        fig.add_shape(
            type="rect",
            x0=head - 0.5,
            x1=head + 0.5,
            y0=layer - 0.5,
            y1=layer + 0.5,
            line={"color": "#00b4d8", "width": 3},
        )
    fig.update_layout(
        height=int(min(900, 140 + 26 * n_layer)),
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        yaxis={"autorange": "reversed", "type": "category"},
        xaxis={"type": "category", "side": "top"},
    )
    return fig


def selected_head(event) -> tuple[int, int] | None:
    """The (layer, head) of the JSD grid's cell a click selected (its customdata), or None."""
    try:
        selection = event["selection"] if isinstance(event, dict) else event.selection
        point = selection["points"][0]
        layer, head = point["customdata"][:2]
        return int(layer), int(head)
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return None


def span_labels(record: AttentionRecord, spans: list[Span]) -> list[str]:
    """Axis labels for a map's rows: a token's own label ("3 sat") for one position, "40–47" for a pooled bin."""
    labels = record.labels()
    return [labels[s] if e - s == 1 else f"{s}–{e - 1}" for s, e in spans]


def diverging_colorscale(gamma: float = 1.0, n_stops: int = 33) -> list[list]:
    """Colour stops over [-span, span] that give a change ``u`` (a share of the span) the :data:`DIFF_SCALE`
    colour at ``sign(u) |u| ** gamma``: white at 0 whatever the gamma; 0.5 lifts small changes, as √ colour lifts
    small weights."""
    if gamma <= 0:
        raise ValueError(f"gamma ({gamma}) must be positive")
    levels = np.linspace(-1.0, 1.0, n_stops)
    colors = sample_colorscale(DIFF_SCALE, [float((w + 1) / 2) for w in levels])
    return [
        [float((np.sign(w) * abs(w) ** (1.0 / gamma) + 1) / 2), color] for w, color in zip(levels, colors, strict=True)
    ]


HEAD_PAIR_SIDE = 220  # each of the three maps, a side, in pixels (three fit the page's 940)
HEAD_PAIR_GAP = 0.17  # between two maps (a share of the width): B's colour bar, then B − A's row labels


def make_compare_head_figure(comparison: Comparison, pair: HeadPair, *, gamma: float = 1.0) -> go.Figure:
    """One head in A and in B on one colour scale (0 to the larger of their largest weights; weight ``w`` at the
    colour of ``(w / top) ** gamma``), and B − A on the aligned tokens (diverging, white at 0, symmetric around
    its largest change, under the same ``gamma``: :func:`diverging_colorscale`). Hidden keys are grey. A map past the full view is pooled: its rows name token ranges.
    """
    a, b, diff = (x.float().numpy() for x in (pair.a, pair.b, pair.diff))
    finite = np.concatenate([a[np.isfinite(a)], b[np.isfinite(b)]])
    top = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    finite_diff = np.abs(diff[np.isfinite(diff)])
    span = float(finite_diff.max()) if finite_diff.size and finite_diff.max() >= FLOAT_FLOOR else FLOAT_FLOOR
    titles = [
        t("compare_fig.head_a", head=f"L{pair.layer} {head_label(pair.head)}"),
        t("compare_fig.head_b", head=f"L{pair.layer} {head_label(pair.head)}"),
        t("compare_fig.head_diff"),
    ]
    fig = make_subplots(rows=1, cols=3, subplot_titles=titles, horizontal_spacing=HEAD_PAIR_GAP)
    shared_bar_x = fig.layout.xaxis2.domain[1] + 0.01  # A and B's one scale stands right of B, before B − A's labels
    labels = [
        [plain_text(x) for x in span_labels(comparison.a, pair.a_spans)],
        [plain_text(x) for x in span_labels(comparison.b, pair.b_spans)],
        [plain_text(x) for x in span_labels(comparison.a, pair.diff_spans)],
    ]
    weight_ticks = [0.0, top / 2, top]
    hover = t("figures.hover_cell", query="%{y}", key="%{x}")
    for col, (z, names) in enumerate(zip((a, b), labels[:2], strict=True), start=1):
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=names[: z.shape[1]],
                y=names[: z.shape[0]],
                zmin=0.0,
                zmax=top,
                colorscale=weight_colorscale(gamma),
                showscale=col == 1,
                colorbar={
                    "title": {"text": t("figures.weight"), "side": "top"},
                    "thickness": 10,
                    "x": shared_bar_x,
                    "len": 1.0,
                    "tickvals": weight_ticks,
                    "ticktext": [f"{rounded(v):g}" for v in weight_ticks],
                },
                hovertemplate=hover,
                hoverongaps=False,
            ),
            row=1,
            col=col,
        )
    diff_ticks = [-span, 0.0, span]
    fig.add_trace(
        go.Heatmap(
            z=diff,
            x=labels[2][: diff.shape[1]],
            y=labels[2][: diff.shape[0]],
            zmin=-span,
            zmax=span,
            zmid=0.0,
            colorscale=diverging_colorscale(gamma),
            colorbar={
                "title": {"text": "B − A", "side": "top"},
                "thickness": 10,
                "x": 1.01,
                "len": 1.0,
                "tickvals": diff_ticks,
                "ticktext": [f"{rounded(v):g}" for v in diff_ticks],
            },
            hovertemplate="%{y} → %{x}<br>B − A %{z:.3g}<extra></extra>",
            hoverongaps=False,
        ),
        row=1,
        col=3,
    )
    for col, names in enumerate(labels, start=1):
        fig.update_xaxes(type="category", showticklabels=False, constrain="domain", row=1, col=col)
        fig.update_yaxes(
            type="category",
            autorange="reversed",
            scaleanchor=f"x{'' if col == 1 else col}",
            constrain="domain",
            row=1,
            col=col,
            **thinned_ticks(names, HEAD_PAIR_SIDE),
        )
    fig.update_layout(
        height=HEAD_PAIR_SIDE + 70,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        plot_bgcolor=MASKED_COLOR,
    )
    return fig


__all__ = [
    "diverging_colorscale",
    "jsd_scale",
    "make_compare_head_figure",
    "make_compare_jsd_figure",
    "make_compare_stat_figure",
    "selected_head",
    "span_labels",
    "stat_grid",
]

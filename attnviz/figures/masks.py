"""Figures of the Mask lab: a mask with the doctor's findings on it, attention under it, and what changed."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import torch
from torch import Tensor

from attnviz.figures.base import MASKED_COLOR, column_width, fit_token_axes, make_head_heatmap_figure
from attnviz.i18n.translate import t, tr

# one marker colour per problem the doctor can report
PROBLEM_COLORS = {
    "future_leak": "#d62728",
    "cross_document": "#bcbd22",
    "fully_masked_row": "#9467bd",
    "attends_padding": "#ff7f0e",
    "inverted": "#8c564b",
    "bad_shape": "#7f7f7f",
    "missing_self": "#e377c2",
    "over_masked": "#17becf",
}
NAN_COLOR = "#d62728"
KEPT_COLOR = "#9ecae1"
MAX_MARKERS = 4096  # cells drawn per problem; the count is in the legend
FIGURE_WIDTH = column_width(2)  # the Mask lab draws its maps two a row: each fills its column, with square cells
LEGEND_PX = 60  # under a mask with findings: their legend


def _square_layout(fig: go.Figure, labels: list[str], title: str) -> go.Figure:
    """Title and axes of a (T, T) map, sized as every token map is (:func:`attnviz.figures.base.fit_token_axes`);
    room for a colour bar whether it has one or not, so the maps two a row are the same size, cell for cell."""
    fig.update_layout(
        title={"text": tr(title), "y": 0.99, "yanchor": "top"},
        xaxis={"title": {"text": t("mask_figures.key_axis")}, "type": "category", "tickangle": -60, "side": "top"},
        yaxis={"title": {"text": t("mask_figures.query_axis")}, "type": "category", "autorange": "reversed"},
        legend={"orientation": "h", "y": -0.02, "yanchor": "top"},
    )
    findings = any(trace.type == "scatter" for trace in fig.data)
    return fit_token_axes(fig, labels, labels, max_width=FIGURE_WIDTH, bottom=LEGEND_PX if findings else 10)


def make_mask_figure(
    keep: Tensor, labels: list[str], *, problems: dict[str, Tensor] | None = None, title: str = ""
) -> go.Figure:
    """A keep mask (T, T), bool: kept cells blue, hidden cells grey; each problem's cells marked with an x."""
    if keep.dtype != torch.bool or tuple(keep.shape) != (len(labels), len(labels)):
        raise ValueError(f"a ({len(labels)}, {len(labels)}) bool keep mask is needed, not {tuple(keep.shape)}")
    z = keep.to(torch.uint8).numpy()  # (T, T): 1 kept, 0 hidden
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=labels,
            y=labels,
            zmin=0,
            zmax=1,
            colorscale=[[0.0, MASKED_COLOR], [1.0, KEPT_COLOR]],
            showscale=False,
            xgap=1,
            ygap=1,
            hovertemplate=t("mask_figures.cell_hover"),
            customdata=np.where(z == 1, t("mask_figures.may_attend"), t("mask_figures.hidden")),
        )
    )
    for kind, cells in (problems or {}).items():
        where = torch.nonzero(cells.reshape(keep.shape))[:MAX_MARKERS]  # (n, 2): query, key
        if not len(where):
            continue
        fig.add_trace(
            go.Scatter(
                x=[labels[k] for k in where[:, 1].tolist()],
                y=[labels[q] for q in where[:, 0].tolist()],
                mode="markers",
                marker={"symbol": "x", "size": 7, "color": PROBLEM_COLORS.get(kind, "black")},
                name=f"{kind} ({int(cells.sum()):,})",
                hovertemplate=t("mask_figures.problem_hover", kind=kind),
            )
        )
    return _square_layout(fig, labels, title)


def make_masked_weights_figure(weights: Tensor, labels: list[str], keep: Tensor, *, title: str = "") -> go.Figure:
    """Weights (T, T) under a mask: hidden cells grey, rows that came out NaN drawn red across."""
    fig = make_head_heatmap_figure(
        weights.nan_to_num(0.0), labels, labels, title=title, mask=keep, max_width=FIGURE_WIDTH
    )
    return _mark_nan_rows(fig, weights, labels)


def _mark_nan_rows(fig: go.Figure, weights: Tensor, labels: list[str]) -> go.Figure:
    """Draw the rows of ``weights`` (T, T) that hold a NaN red across, over whatever the figure shows."""
    nan_rows = torch.isnan(weights).any(dim=-1)  # (T,)
    if nan_rows.any():
        z = np.where(nan_rows.numpy()[:, None], 1.0, np.nan) * np.ones((1, len(labels)))
        fig.add_trace(
            go.Heatmap(
                z=z.astype(np.float32),
                x=labels,
                y=labels,
                colorscale=[[0.0, NAN_COLOR], [1.0, NAN_COLOR]],
                showscale=False,
                hovertemplate=t("mask_figures.nan_hover"),
                hoverongaps=False,
            )
        )
    return fig


def make_difference_figure(difference: Tensor, labels: list[str], *, title: str = "") -> go.Figure:
    """with - without (T, T) on a diverging scale from -1 to 1; rows that came out NaN are drawn red."""
    fig = go.Figure(
        go.Heatmap(
            z=difference.float().numpy().astype(np.float32),
            x=labels,
            y=labels,
            zmin=-1.0,
            zmax=1.0,
            zmid=0.0,
            colorscale="RdBu_r",
            colorbar={"title": {"text": t("mask_figures.delta_weight")}, "thickness": 12},
            hovertemplate=t("mask_figures.delta_hover"),
            hoverongaps=False,
        )
    )
    return _square_layout(_mark_nan_rows(fig, difference, labels), labels, title)


def make_leak_figure(change: Tensor, labels: list[str], tolerance: float, cuts: list[int]) -> go.Figure:
    """Per query row, how much its last hidden state moved when later tokens changed (log scale)."""
    tested = ~torch.isnan(change)
    values = change.clamp_min(1e-12).numpy()
    colors = np.where(change.numpy() > tolerance, NAN_COLOR, "#2ca02c")
    fig = go.Figure(
        go.Bar(
            x=[labels[i] for i in range(len(labels)) if tested[i]],
            y=values[tested.numpy()],
            marker={"color": colors[tested.numpy()]},
            hovertemplate=t("mask_figures.change_hover"),
            name=t("mask_figures.change_name"),
        )
    )
    shown = [labels[i] for i in range(len(labels)) if tested[i]]
    if shown:  # a trace, not add_hline: on a log axis an hline's annotation is placed at 10**y
        fig.add_trace(
            go.Scatter(
                x=[shown[0], shown[-1]],
                y=[tolerance, tolerance],
                mode="lines",
                line={"dash": "dot", "color": "grey"},
                name=t("mask_figures.tolerance", tolerance=tolerance),
                hoverinfo="skip",
            )
        )
    for cut in cuts:
        if cut < len(labels):
            fig.add_vline(x=cut - 0.5, line={"dash": "dash", "color": "#999999"})
    fig.update_layout(
        height=300,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        xaxis={"type": "category", "title": {"text": t("mask_figures.row_axis")}},
        yaxis={"type": "log", "title": {"text": t("mask_figures.change_axis")}, "exponentformat": "power"},
        legend={"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},  # above: long rows' labels fill below
    )
    return fig

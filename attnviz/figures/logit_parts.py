"""Bar charts of one logit's parts: per head dimension, and per frequency band (or dimension pairs)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attnviz.i18n.translate import t, tr
from attnviz.labs.logit_parts import LogitParts

POSITIVE, NEGATIVE, TOTAL = "#1f77b4", "#d62728", "#444444"


def _mark_total(fig: go.Figure, parts: LogitParts) -> None:
    """A dashed line at the logit the bars add up to, named in the legend."""
    label = f"logit = {parts.logit:.3f}"
    if parts.softcap is not None:
        label += t("logit_parts_fig.before_cap", capped=parts.capped_logit)
    fig.add_hline(y=parts.logit, line={"dash": "dash", "color": TOTAL, "width": 1.5})
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line={"dash": "dash", "color": TOTAL}, name=label))


def _colours(values: np.ndarray) -> list[str]:
    return [POSITIVE if v >= 0 else NEGATIVE for v in values]


def make_dimension_parts_figure(parts: LogitParts, *, sort: bool = False, title: str = "") -> go.Figure:
    """One bar per head dimension d, height q[d] k[d] scale; ``sort`` orders them by |part|, largest first."""
    values = parts.per_dim.double().numpy()
    order = np.argsort(-np.abs(values), kind="stable") if sort else np.arange(len(values))
    fig = go.Figure(
        go.Bar(
            x=[f"d{d}" for d in order],
            y=values[order].astype(np.float32),
            marker_color=_colours(values[order]),
            hovertemplate=t("logit_parts_fig.dim_hover"),
            name="q[d]·k[d]·scale",
        )
    )
    _mark_total(fig, parts)
    fig.update_layout(
        title={"text": tr(title)},
        height=320,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        xaxis={
            "title": {"text": t("logit_parts_fig.dim_axis_sorted" if sort else "logit_parts_fig.dim_axis")},
            "type": "category",
        },
        yaxis={"title": {"text": t("logit_parts_fig.part_axis")}},
        legend={"orientation": "h", "y": -0.25},
        bargap=0.1,
    )
    return fig


def make_band_parts_figure(bands: pd.DataFrame, parts: LogitParts, *, title: str = "") -> go.Figure:
    """One bar per band of dimension pairs from :func:`attnviz.labs.logit_parts.band_summary`, highest frequency first."""
    values = bands["contribution"].to_numpy(dtype=np.float64)
    fig = go.Figure(
        go.Bar(
            x=[tr(band) for band in bands["band"]],
            y=values.astype(np.float32),
            marker_color=_colours(values),
            customdata=[tr(freq) for freq in bands["freq_range"]],
            hovertemplate=t("logit_parts_fig.band_hover"),
            name=t("logit_parts_fig.band_sum"),
        )
    )
    _mark_total(fig, parts)
    axis = t("logit_parts_fig.band_axis") if parts.inv_freq is not None else t("logit_parts_fig.pairs_axis")
    fig.update_layout(
        title={"text": tr(title)},
        height=320,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        xaxis={"title": {"text": axis}, "type": "category"},
        yaxis={"title": {"text": t("logit_parts_fig.part_axis")}},
        legend={"orientation": "h", "y": -0.35},
    )
    return fig


__all__ = ["make_band_parts_figure", "make_dimension_parts_figure"]

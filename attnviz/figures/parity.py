"""The Parity page's figure: the largest difference between our layers and the model's, for every head."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from torch import Tensor

from attnviz.figures.base import head_label
from attnviz.i18n.translate import t
from attnviz.models.record import PARITY_TOLERANCE


def parity_colorscale(zmin: float, zmax: float, tolerance: float) -> list[list]:
    """Green below the tolerance, pale at it, red at ``zmax``, over log10 differences in [zmin, zmax]."""
    at = (np.log10(tolerance) - zmin) / (zmax - zmin)
    return [[0.0, "#1a9850"], [float(np.clip(at, 0.0, 1.0)), "#d9ef8b"], [1.0, "#d73027"]]


def make_parity_figure(max_abs_diff: Tensor, tolerance: float = PARITY_TOLERANCE) -> go.Figure:
    """Largest |ours - model| for every head: (n_layer, n_head) on a log colour scale.

    The scale runs from 1e-12 to the worst difference (at least 1e-3 and ten times the tolerance), and the
    pale stop sits exactly at the tolerance whatever that top is.
    """
    diff = max_abs_diff.double().clamp_min(1e-12).log10().numpy()  # (n_layer, n_head)
    n_layer, n_head = diff.shape
    zmin, zmax = -12.0, max(-3.0, float(np.log10(tolerance)) + 1, float(diff.max()))  # the tolerance inside
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

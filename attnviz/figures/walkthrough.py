"""Plotly figures for the Walkthrough page: one head of one step's tensor, pure functions from arrays to figures.

Attention weights reuse :func:`attnviz.figures.base.make_head_heatmap_figure`, the
app's one colour scale for weights. Every other tensor of a step (q, k, v,
scores, outputs) can be any real number, so it gets a diverging scale centred
on 0; a score masked to −inf is NaN here and shows as the grey background, as
masked cells do everywhere in attnviz. Labels are user text, escaped here.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import torch
from torch import Tensor

from attnviz.core.token_display import plain_text
from attnviz.figures.base import MASKED_COLOR, column_width, make_head_heatmap_figure
from attnviz.i18n.translate import t, tr

DIVERGING = "RdBu"


def _height(n_rows: int) -> int:
    return int(min(900, max(320, 170 + 14 * n_rows)))


def make_tensor_heatmap_figure(
    values: Tensor,
    row_labels: list[str],
    col_labels: list[str],
    *,
    title: str = "",
    axes: tuple[str, str] | None = None,
) -> go.Figure:
    """A (rows, cols) matrix of any real numbers: red above 0, blue below, symmetric about 0; −inf grey."""
    axes = (
        (t("walkthrough_lib.axis_token"), t("walkthrough_lib.axis_feature")) if axes is None else tuple(map(tr, axes))
    )
    v = values.detach().float().cpu()  # (rows, cols)
    if v.ndim != 2 or v.shape != (len(row_labels), len(col_labels)):
        raise ValueError(f"values {tuple(v.shape)} do not match {len(row_labels)} x {len(col_labels)} labels")
    v = v.masked_fill(torch.isneginf(v), float("nan"))
    finite = v[torch.isfinite(v)]
    bound = float(finite.abs().max()) if finite.numel() else 1.0
    bound = bound or 1.0
    fig = go.Figure(
        go.Heatmap(
            z=v.numpy().astype(np.float32),
            x=[plain_text(label) for label in col_labels],
            y=[plain_text(label) for label in row_labels],
            zmin=-bound,
            zmax=bound,
            zmid=0.0,
            colorscale=DIVERGING,
            reversescale=True,
            colorbar={"thickness": 14},
            hovertemplate=t("walkthrough_fig.hover", row=axes[0], col=axes[1]),
            hoverongaps=False,
        )
    )
    fig.update_layout(
        title={"text": tr(title), "y": 0.99, "yanchor": "top"},
        height=_height(len(row_labels)),
        plot_bgcolor=MASKED_COLOR,
        margin={"l": 10, "r": 10, "t": 110, "b": 10},
        xaxis={"title": {"text": axes[1]}, "type": "category", "tickangle": -60, "side": "top"},
        yaxis={"title": {"text": axes[0]}, "type": "category", "autorange": "reversed"},
    )
    return fig


def make_step_figure(
    values: Tensor,
    row_labels: list[str],
    col_labels: list[str],
    *,
    title: str = "",
    axes: tuple[str, str] | None = None,
    weights: bool = False,
    visible: Tensor | None = None,
) -> go.Figure:
    """One head of a step, drawn in the left of two columns (its code on the right): attention weights on the
    app's weight scale (``visible`` greys what is masked), anything else on the diverging scale."""
    if weights:  # escapes the labels itself
        return make_head_heatmap_figure(
            values, row_labels, col_labels, title=title, mask=visible, max_width=column_width(2)
        )
    return make_tensor_heatmap_figure(values, row_labels, col_labels, title=title, axes=axes)

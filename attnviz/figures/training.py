"""Plotly figure for the Training page: the three runs' loss and accuracy curves, side by side.

Pure: lists of floats in, a figure out. The page redraws it every second or so
while training runs, so each curve is sent as one float32 array (about 1 kB
for 300 steps) and smoothed here, not in the browser.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from attnviz.i18n.translate import t, tr
from attnviz.labs.scaling import SCALE_KINDS, scale_titles
from attnviz.labs.training.runs import TARGET, TARGET_WINDOW, moving_average

SCALE_COLORS = {"sqrt_dk": "#2a9d8f", "none": "#e63946", "sqrt_dmodel": "#f4a261"}


def make_training_figure(
    losses: Mapping[str, Sequence[float]],
    accuracies: Mapping[str, Sequence[float]],
    *,
    steps: int,
    n_values: int,
    smooth: int = TARGET_WINDOW,
) -> go.Figure:
    """Loss (left) and batch accuracy (right) against the step, one line per scale kind present.

    Each line is the trailing mean over ``smooth`` steps. The x axes span all ``steps``, so
    a live chart fills in from the left instead of rescaling. Dotted guides: the loss of
    a uniform guess over ``n_values`` answers, ln(n_values), and the accuracy ``TARGET``.
    A non-finite loss (a diverged run) leaves a gap.
    """
    titles = {kind: tr(title) for kind, title in scale_titles().items()}
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(t("training_fig.loss"), t("training_fig.accuracy")),
        horizontal_spacing=0.08,
    )
    for kind in SCALE_KINDS:
        if kind not in losses:
            continue
        for col, values in ((1, losses[kind]), (2, accuracies.get(kind, ()))):
            finite = [x if math.isfinite(x) else math.nan for x in values]
            y = np.asarray(moving_average(finite, smooth) if finite else [], dtype=np.float32)
            fig.add_trace(
                go.Scatter(
                    x=np.arange(1, len(y) + 1, dtype=np.int32),
                    y=y,
                    mode="lines",
                    name=titles[kind],
                    legendgroup=kind,
                    showlegend=col == 1,
                    line={"color": SCALE_COLORS[kind], "width": 2},
                    hovertemplate=t("training_fig.hover", scale=titles[kind]),
                ),
                row=1,
                col=col,
            )
    fig.add_hline(y=math.log(n_values), line={"dash": "dot", "color": "#888"}, row=1, col=1)
    fig.add_hline(y=TARGET, line={"dash": "dot", "color": "#888"}, row=1, col=2)
    fig.update_xaxes(title_text=t("training_fig.step"), range=[1, max(2, steps)])
    fig.update_yaxes(rangemode="tozero", row=1, col=1)
    fig.update_yaxes(range=[0, 1.02], tickformat=".0%", row=1, col=2)
    fig.update_layout(
        height=380,
        margin={"l": 50, "r": 20, "t": 40, "b": 50},
        legend={"orientation": "h", "y": -0.2},
    )
    return fig

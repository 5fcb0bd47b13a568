"""The alignment view: the mean cross-attention of chosen heads, target tokens down and source tokens across, with
each target token's most-attended source token marked."""

from __future__ import annotations

import plotly.graph_objects as go

from attnviz.core.token_display import plain_text
from attnviz.figures.base import make_head_heatmap_figure
from attnviz.labs.alignment import Alignment

MARK_COLOR = "#ff4b4b"


def make_alignment_figure(found: Alignment, target_labels: list[str], source_labels: list[str], *, title: str = ""):
    """The map of ``found.weights`` (T, S) with a marker on each row's hard alignment."""
    fig = make_head_heatmap_figure(found.weights, target_labels, source_labels, title=title)
    x = [plain_text(source_labels[j]) for j in found.hard.tolist()]
    y = [plain_text(label) for label in target_labels]
    fig.add_trace(
        go.Scatter(
            x=x,
            y=y,
            mode="markers+lines",
            marker={"symbol": "circle-open", "size": 9, "color": MARK_COLOR, "line": {"width": 2}},
            line={"color": MARK_COLOR, "width": 1, "dash": "dot"},
            hoverinfo="skip",
            showlegend=False,
        )
    )
    return fig

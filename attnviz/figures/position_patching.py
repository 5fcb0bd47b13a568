"""The figure of one head patched at one position at a time: a bar a token, the fraction of the metric it restores.

A pure builder in the ``make_<thing>_figure(data, *, options) -> go.Figure`` form. Tokens are user text: on the
axis they are escaped (:func:`plain_text`, invisible characters made visible) and cut to
:data:`AXIS_TOKEN_CHARS`, whole on hover (:func:`hover_text`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from attnviz.core.token_display import plain_text, visible_text
from attnviz.figures.base import hover_text
from attnviz.i18n.translate import t

AXIS_TOKEN_CHARS = 12  # a token's characters on the axis; the rest on hover


def position_label(position: int, token: str) -> str:
    """``"3 Mary"``: the position and its token, escaped and cut to :data:`AXIS_TOKEN_CHARS` ("…" past it)."""
    shown = visible_text(token)
    cut = shown if len(shown) <= AXIS_TOKEN_CHARS else shown[: AXIS_TOKEN_CHARS - 1] + "…"
    return f"{position} {plain_text(cut)}"


def make_position_patch_figure(
    fractions: Sequence[float | None], tokens: Sequence[str], *, title: str, measure: str
) -> go.Figure:
    """One bar a position (its token on the axis): the fraction restored when one head is patched there alone,
    positive red, negative blue; a position not run is a gap that says so on hover."""
    y = np.array([np.nan if v is None else v for v in fractions], dtype=np.float64)
    labels = [position_label(i, token) for i, token in enumerate(tokens)]
    hovers = [
        f"{hover_text(visible_text(token))}<br>{measure}: "
        + (t("heads_matter_fig.not_run") if v is None else f"{v:+.4g}")
        for token, v in zip(tokens, fractions, strict=True)
    ]
    fig = go.Figure(
        go.Bar(
            x=labels,
            y=y,
            customdata=hovers,
            marker_color=["#d62728" if v is not None and v >= 0 else "#1f77b4" for v in fractions],
            hovertemplate="%{customdata}<extra></extra>",
        )
    )
    fig.update_layout(
        title=title,
        xaxis={"title": t("ablation_fig.position"), "type": "category", "tickangle": -45},
        yaxis_title=measure,
        height=340,
        margin={"l": 60, "r": 20, "t": 50, "b": 90},
    )
    return fig

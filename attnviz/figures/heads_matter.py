"""Figures for which heads matter: a layer x head map of signed effects (a patched head's restored fraction, an
estimate, a head's direct logit), and one head's direct logit at every position.

Pure builders in the ``make_<thing>_figure(data, *, options) -> go.Figure`` form. Tokens reach the hover boxes only
through :func:`hover_text`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from attnviz.figures.ablation import layer_head_layout
from attnviz.figures.base import hover_text
from attnviz.i18n.translate import t


def make_head_effect_figure(
    values: Sequence[Sequence[float | None]],
    *,
    title: str,
    measure: str,
    signed: bool = True,
    limit: float | None = None,
) -> go.Figure:
    """Layer (rows) x head (columns): one number a head. Signed values on a diverging scale centred on 0, its ends
    at ± the largest |value| (so the strongest head is the darkest whatever the scale of the metric); unsigned
    ones from white at 0. A head without a value (not run) is grey and says so on hover. ``limit``: the scale's end
    instead (two maps of the same measure drawn side by side share one)."""
    z = np.array([[np.nan if v is None else v for v in row] for row in values], dtype=np.float64)
    n_layer, n_head = z.shape if z.size else (0, 0)
    top = float(np.nanmax(np.abs(z))) if np.isfinite(z).any() else 0.0
    top = limit if limit is not None and limit > 0 else top if top > 0 else 1.0
    shown = [[t("heads_matter_fig.not_run") if v is None else f"{v:+.4g}" for v in row] for row in values]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[f"H{h}" for h in range(n_head)],
            y=[f"L{layer}" for layer in range(n_layer)],
            text=shown,
            colorscale="RdBu" if signed else "Reds",
            reversescale=signed,  # positive red, negative blue
            zmin=-top if signed else 0.0,
            zmax=top,
            colorbar={"title": {"text": measure}},
            hovertemplate=f"%{{y}} %{{x}}: %{{text}} ({measure})<extra></extra>",
        )
    )
    return layer_head_layout(fig, title, z)


def make_positions_figure(values: Sequence[float], labels: Sequence[str], *, title: str, measure: str) -> go.Figure:
    """One bar a position: a head's direct contribution to the logit there; the token on hover."""
    shown = [hover_text(label) for label in labels]
    y = np.asarray(values, dtype=np.float64)
    fig = go.Figure(
        go.Bar(
            x=list(range(len(y))),
            y=y,
            customdata=shown,
            marker_color=["#d62728" if v >= 0 else "#1f77b4" for v in y],
            hovertemplate=f"%{{x}} %{{customdata}}<br>{measure}: %{{y:+.4g}}<extra></extra>",
        )
    )
    fig.update_layout(
        title=title,
        xaxis_title=t("ablation_fig.position"),
        yaxis_title=measure,
        height=300,
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
    )
    return fig

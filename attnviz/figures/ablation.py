"""Figures for head ablation: the change at each position, and the layer x head map of every head ablated alone.

Pure builders in the ``make_<thing>_figure(data, *, options) -> go.Figure`` form, drawing what
:mod:`attnviz.labs.heads_matter.ablation` returns. Tokens reach the hover boxes only through :func:`hover_text`.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from attnviz.figures.base import hover_text
from attnviz.i18n.translate import t
from attnviz.labs.heads_matter.ablation import AblationSweep
from attnviz.labs.heads_matter.effect import AblationResult
from attnviz.models.record import token_labels


def make_ablation_change_figure(result: AblationResult, *, title: str | None = None) -> go.Figure:
    """One bar a position: KL(before ‖ after) of the next-token distribution (an LM) or the cosine distance of the
    last hidden states (an encoder); the token on hover."""
    if title is None:
        title = t("ablation_fig.kl_title") if result.logits else t("ablation_fig.hidden_title")
    measure = t("ablation_fig.kl") if result.logits else t("ablation_fig.distance")
    labels = [hover_text(label) for label in token_labels(result.tokens, limit=None)]
    fig = go.Figure(
        go.Bar(
            x=list(range(len(result.change))),
            y=np.asarray(result.change, dtype=np.float32),
            customdata=labels,
            hovertemplate=f"%{{customdata}}<br>{measure}: %{{y:.4g}}<extra></extra>",
            marker_color="#d62728",
        )
    )
    fig.update_layout(
        title=title,
        xaxis_title=t("ablation_fig.position"),
        yaxis_title=measure,
        height=320,
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
    )
    return fig


def make_ablation_sweep_figure(sweep: AblationSweep, *, title: str | None = None) -> go.Figure:
    """Layer (rows) x head (columns): each head's effect when ablated alone (mean KL or mean cosine distance); a
    head not run yet (a sweep stopped part way) is blank, and says so on hover."""
    if title is None:
        title = t("ablation_fig.sweep_kl") if sweep.measure == "kl_mean" else t("ablation_fig.sweep_hidden")
    z = np.array([[np.nan if v is None else v for v in row] for row in sweep.values], dtype=np.float64)
    n_layer, n_head = z.shape if z.size else (0, 0)
    done = sweep.done or [[True] * n_head for _ in range(n_layer)]
    shown = [
        [
            (f"{v:.4g}" if v is not None else t("ablation_fig.no_value")) if ran else t("ablation_fig.not_run")
            for v, ran in zip(row, ran_row, strict=True)
        ]
        for row, ran_row in zip(sweep.values, done, strict=True)
    ]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[f"H{h}" for h in range(n_head)],
            y=[f"L{layer}" for layer in range(n_layer)],
            text=shown,
            colorscale="Reds",
            zmin=0,  # both ends given, or plotly fits the scale to the values and no effect is not white
            zmax=float(np.nanmax(z)) if np.isfinite(z).any() and np.nanmax(z) > 0 else 1.0,
            hovertemplate="%{y} %{x}: %{text}<extra></extra>",
        )
    )
    return layer_head_layout(fig, title, z)


def layer_head_layout(fig: go.Figure, title: str, z: np.ndarray) -> go.Figure:
    """A layer (rows, top down) x head (columns) map's layout, its height by its layers; a head without a value
    (NaN: not run, or one token) is grey, not white like no effect."""
    fig.update_layout(
        title=title,
        xaxis_title=t("ablation_fig.head"),
        yaxis_title=t("ablation_fig.layer"),
        yaxis_autorange="reversed",
        plot_bgcolor="#d9d9d9" if np.isnan(z).any() else None,
        height=max(300, 22 * (z.shape[0] if z.size else 0) + 120),
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
    )
    return fig

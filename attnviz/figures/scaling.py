"""The Scaling page's figures: every head under each scale, Var(q·k) against d_k, and the softmax's gradient."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attnviz.figures.base import head_label, hover_text
from attnviz.i18n.message import Text
from attnviz.i18n.translate import t, tr

SCALE_COLORS = {"sqrt_dk": "#2ca02c", "none": "#d62728", "sqrt_dmodel": "#1f77b4"}


def make_scaling_overview_figure(table: pd.DataFrame, stat: str, titles: dict[str, Text | str]) -> go.Figure:
    """One layer x head heatmap per scale, side by side on one colour scale: ``stat`` is entropy_norm or
    saturated_share, read from columns ``{stat}_{kind}``."""
    from plotly.subplots import make_subplots

    titles = {kind: tr(title) for kind, title in titles.items()}
    kinds = list(titles)
    name = hover_text(t(f"scaling.stat_{stat}"))  # the statistic's name in the reader's language, never the column
    fig = make_subplots(rows=1, cols=len(kinds), subplot_titles=[titles[k] for k in kinds], horizontal_spacing=0.04)
    for i, kind in enumerate(kinds):
        grid = table.pivot(index="layer", columns="head", values=f"{stat}_{kind}")  # (n_layer, n_head)
        fig.add_trace(
            go.Heatmap(
                z=grid.to_numpy(dtype=np.float32),
                x=[head_label(h) for h in grid.columns],
                y=[f"L{layer}" for layer in grid.index],
                zmin=0.0,
                zmax=1.0,
                colorscale="Cividis",
                showscale=i == len(kinds) - 1,
                colorbar={"title": {"text": name, "side": "right"}, "thickness": 14},
                hovertemplate="%{y} %{x}<br>" + name + " %{z:.3f}<extra>" + titles[kind] + "</extra>",
            ),
            row=1,
            col=i + 1,
        )
    n_layer = table["layer"].nunique()
    fig.update_layout(height=int(min(900, 140 + 22 * n_layer)), margin={"l": 10, "r": 10, "t": 40, "b": 10})
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category", side="bottom")
    return fig


# labels on a log axis: 1, 2, 5 in each decade (plotly's own minor labels crowd into each other)
LOG_TICKS = [m * 10.0**e for e in range(-3, 5) for m in (1, 2, 5)]


def make_variance_figure(random: pd.DataFrame) -> go.Figure:
    """Var(q·k) of random unit-variance vectors against d_k, unscaled and scaled, beside y = d_k."""
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=random["d_k"],
            y=random["var_unscaled"],
            name=t("scaling_fig.var_unscaled"),
            mode="lines+markers",
            line={"color": SCALE_COLORS["none"]},
        )
    )
    fig.add_trace(
        go.Scatter(
            x=random["d_k"],
            y=random["var_scaled"],
            name="Var(q·k / √d_k)",
            mode="lines+markers",
            line={"color": SCALE_COLORS["sqrt_dk"]},
        )
    )
    # drawn last, over the measured line it should match
    fig.add_trace(go.Scatter(x=random["d_k"], y=random["d_k"], name="y = d_k", line={"dash": "dash", "color": "black"}))
    fig.update_layout(
        height=360,
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        xaxis={"type": "log", "title": {"text": "d_k"}, "tickvals": list(random["d_k"])},
        yaxis={"type": "log", "dtick": 1, "title": {"text": t("scaling_fig.variance")}},
        legend={"orientation": "h", "y": -0.25},
    )
    return fig


def make_layer_variance_figure(layers: pd.DataFrame, head_dim: int) -> go.Figure:
    """The model's real Var(q·k) per layer, as a multiple of d_k (1 for unit-variance q and k), and after 1/√d_k."""
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=[f"L{layer}" for layer in layers["layer"]],
            y=layers["ratio_to_dk"],
            name=f"Var(q·k) / d_k (d_k = {head_dim}) = Var(q·k / √d_k)",
            marker={"color": SCALE_COLORS["sqrt_dk"]},
            hovertemplate="%{x}: Var(q·k)/d_k = %{y:.2f}<extra></extra>",
        )
    )
    fig.add_hline(y=1.0, line={"dash": "dot", "color": "grey"})
    fig.update_layout(
        height=320,
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        xaxis={"title": {"text": t("scaling_fig.layer")}},
        yaxis={"type": "log", "title": {"text": "Var(q·k) / d_k"}, "tickvals": LOG_TICKS, "showgrid": True},
        legend={"orientation": "h", "y": -0.3},
    )
    return fig


def make_gradient_figure(curve, markers: dict[str, float], titles: dict[str, str]) -> go.Figure:
    """The softmax's gradient against the scale (multiples of 1/√d_k): Jacobian norm, gradient to q, vanishing rows."""
    from plotly.subplots import make_subplots

    titles = {kind: tr(title) for kind, title in titles.items()}

    fig = make_subplots(specs=[[{"secondary_y": True}]])
    x = curve.multiples
    fig.add_trace(go.Scatter(x=x, y=curve.jacobian_norm, name=t("scaling_fig.jacobian"), mode="lines+markers"))
    fig.add_trace(go.Scatter(x=x, y=curve.grad_scores_norm, name=t("scaling_fig.grad_scores"), mode="lines"))
    fig.add_trace(go.Scatter(x=x, y=curve.grad_q_norm, name=t("scaling_fig.grad_q"), mode="lines"))
    fig.add_trace(
        go.Scatter(
            x=x,
            y=curve.vanishing_share,
            name=t("scaling_fig.vanishing"),
            mode="lines",
            line={"dash": "dash", "color": "black"},
        ),
        secondary_y=True,
    )
    for kind, multiple in markers.items():
        fig.add_vline(x=multiple, line={"color": SCALE_COLORS[kind], "dash": "dot"})
        fig.add_annotation(
            x=math.log10(multiple),
            y=1.0,
            yref="paper",
            text=titles[kind],
            showarrow=False,
            textangle=-90,
            xanchor="right",
            yanchor="top",
            font={"color": SCALE_COLORS[kind]},
        )
    fig.update_layout(height=400, margin={"l": 10, "r": 10, "t": 30, "b": 10}, legend={"orientation": "h", "y": -0.25})
    fig.update_xaxes(type="log", title={"text": t("scaling_fig.scale_axis")}, tickvals=LOG_TICKS)
    fig.update_yaxes(title={"text": t("scaling_fig.norm")}, secondary_y=False, rangemode="tozero")
    fig.update_yaxes(
        title={"text": t("scaling_fig.share_of_rows")},
        secondary_y=True,
        range=[0, 1.05],
        tickvals=[0, 0.25, 0.5, 0.75, 1],
        tickformat=".0%",
        showgrid=False,
    )
    return fig

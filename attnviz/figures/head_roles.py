"""Figures for head roles: the role map, the clustered similarity matrix, role stability, the sink against length.

Pure builders in the ``make_<thing>_figure(data, *, options) -> go.Figure``
form: they take what :mod:`attnviz.labs.head_roles` returns and draw it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attnviz.i18n.translate import t, tr
from attnviz.labs.head_roles import REDUNDANT_DISTANCE, ROLES, HeadSimilarity, role_name

ROLE_COLOURS = {
    "sink": "#d62728",
    "previous-token": "#1f77b4",
    "self": "#9467bd",
    "local": "#2ca02c",
    "uniform": "#bcbd22",
    "dead": "#404040",
    "content": "#ff7f0e",
    "undetermined": "#c7c7c7",
}


def _role_colorscale() -> list[tuple[float, str]]:
    """A stepped colour scale: role i of :data:`ROLES` fills [i, i + 1) / len(ROLES)."""
    n, scale = len(ROLES), []
    for i, role in enumerate(ROLES):
        scale += [(i / n, ROLE_COLOURS[role]), ((i + 1) / n, ROLE_COLOURS[role])]
    return scale


def _grid(frame: pd.DataFrame, column: str, fill) -> np.ndarray:
    """One column of a (layer, head) frame as a (n_layer, n_head) array."""
    n_layer, n_head = int(frame["layer"].max()) + 1, int(frame["head"].max()) + 1
    grid = np.full((n_layer, n_head), fill, dtype=object if isinstance(fill, str) else float)
    grid[frame["layer"].to_numpy(), frame["head"].to_numpy()] = frame[column].to_numpy()
    return grid


def make_head_roles_figure(roles: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """Layer (rows) x head (columns), coloured by role, with the score and entropy without the sink on hover."""
    title = t("head_roles_fig.roles_title") if title is None else title
    role = _grid(roles, "role", "undetermined")
    z = np.vectorize(ROLES.index)(role).astype(float)  # (n_layer, n_head)
    score, rest = _grid(roles, "score", np.nan), _grid(roles, "entropy_without_sink", np.nan)
    n_layer, n_head = z.shape
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[f"H{h}" for h in range(n_head)],
            y=[f"L{layer}" for layer in range(n_layer)],
            zmin=0,
            zmax=len(ROLES),
            colorscale=_role_colorscale(),
            customdata=np.stack(
                [np.vectorize(lambda name: tr(role_name(name)))(role), np.round(score, 3), np.round(rest, 3)], axis=-1
            ),
            hovertemplate=t("head_roles_fig.roles_hover"),
            xgap=1,
            ygap=1,
            showscale=False,  # a legend of the roles present: a stepped colour bar crowds its labels on short grids
        )
    )
    for name in ROLES:
        if (role == name).any():
            fig.add_trace(
                go.Scatter(
                    x=[None],
                    y=[None],
                    mode="markers",
                    marker={"symbol": "square", "size": 12, "color": ROLE_COLOURS[name]},
                    name=f"{tr(role_name(name))} ({int((role == name).sum())})",
                )
            )
    fig.update_yaxes(autorange="reversed")
    # the legend sits above the grid, under the title: below it, it covered the head labels (H0, H1, ...)
    fig.update_layout(
        title={"text": title, "y": 1.0, "yanchor": "top", "yref": "container", "pad": {"t": 12}},
        height=max(300, 150 + 28 * n_layer),
        legend={
            "orientation": "h",
            "x": 0,
            "xanchor": "left",
            "y": 1.0,
            "yanchor": "bottom",
            "yref": "paper",
        },
        margin={"t": 110, "b": 10},
    )
    return fig


def make_head_similarity_figure(
    similarity: HeadSimilarity, *, threshold: float = REDUNDANT_DISTANCE, title: str | None = None
) -> go.Figure:
    """The JS distance matrix in dendrogram order, with a box round each redundant group (distance ≤ ``threshold``)."""
    title = t("head_roles_fig.similarity_title") if title is None else title
    order = similarity.order
    labels = [similarity.label(i) for i in order]
    distance = similarity.distance[np.ix_(order, order)]  # (N, N)
    fig = go.Figure(
        go.Heatmap(
            z=distance,
            x=labels,
            y=labels,
            zmin=0,
            zmax=1,
            colorscale="Viridis_r",
            colorbar={"title": t("head_roles_fig.js_distance")},
            hovertemplate="%{y} vs %{x}: %{z:.3f}<extra></extra>",
        )
    )
    rank = {leaf: i for i, leaf in enumerate(order)}
    for group in similarity.groups(threshold):
        a, b = rank[group[0]] - 0.5, rank[group[-1]] + 0.5
        fig.add_shape(type="rect", x0=a, x1=b, y0=a, y1=b, line={"color": "#d62728", "width": 2})
    fig.update_yaxes(autorange="reversed")
    side = min(900, max(360, 14 * len(order) + 120))
    fig.update_layout(title=title, height=side)
    return fig


def make_role_stability_figure(stability: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """Layer x head: the share of prompts with the head's most common role (the role written in each cell)."""
    title = t("head_roles_fig.stability_title") if title is None else title
    share, role = _grid(stability, "share", np.nan), _grid(stability, "role", "")
    role = np.vectorize(lambda name: tr(role_name(name)) if name else "", otypes=[object])(role)
    n_layer, n_head = share.shape
    text = role if n_head <= 16 else None
    fig = go.Figure(
        go.Heatmap(
            z=share,
            x=[f"H{h}" for h in range(n_head)],
            y=[f"L{layer}" for layer in range(n_layer)],
            zmin=0,
            zmax=1,
            colorscale="Blues",
            text=text,
            texttemplate="%{text}" if text is not None else None,
            customdata=role,
            hovertemplate=t("head_roles_fig.stability_hover"),
            colorbar={"title": t("head_roles_fig.share")},
            xgap=1,
            ygap=1,
        )
    )
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title=title, height=max(260, 40 + 28 * n_layer))
    return fig


def make_sink_vs_length_figure(sinks: pd.DataFrame, *, top: int = 3, title: str | None = None) -> go.Figure:
    """One line per layer (mean over its heads), and a dashed line for each of the ``top`` strongest sink heads."""
    title = t("head_roles_fig.sink_title") if title is None else title
    fig = go.Figure()
    per_layer = sinks.groupby(["layer", "length"])["first_token_weight"].mean().reset_index()
    for layer, part in per_layer.groupby("layer"):
        fig.add_trace(
            go.Scatter(
                x=part["length"],
                y=part["first_token_weight"],
                mode="lines+markers",
                name=t("head_roles_fig.layer_mean", layer=layer),
                hovertemplate=t("head_roles_fig.layer_mean_hover", layer=layer),
            )
        )
    strongest = sinks.groupby(["layer", "head"])["first_token_weight"].mean().nlargest(top).index
    for layer, head in strongest:
        part = sinks[(sinks["layer"] == layer) & (sinks["head"] == head)]
        fig.add_trace(
            go.Scatter(
                x=part["length"],
                y=part["first_token_weight"],
                mode="lines+markers",
                line={"dash": "dash"},
                name=f"L{layer} H{head}",
                hovertemplate=t("head_roles_fig.head_hover", layer=layer, head=head),
            )
        )
    fig.update_xaxes(type="log", title=t("head_roles_fig.tokens"))
    fig.update_yaxes(title=t("head_roles_fig.first_token_weight"), rangemode="tozero")
    fig.update_layout(title=title, height=380)
    return fig

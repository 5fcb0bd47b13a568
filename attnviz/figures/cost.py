"""The Cost page's figures: time and memory against n for each attention path, and online softmax step by step."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import torch
from torch import Tensor

from attnviz.i18n.message import Text
from attnviz.i18n.translate import t, tr

COST_COLORS = {"naive": "#d62728", "fused": "#1f77b4", "chunked": "#2ca02c"}


def make_cost_figure(
    rows: list[dict],
    metric: str,
    titles: dict[str, Text | str],
    *,
    predicted: list[tuple[int, float]] | None = None,
    limit: int | None = None,
) -> go.Figure:
    """Time or memory against n on log-log axes, one line per path.

    rows: {"path", "tokens", metric}; ``predicted`` draws the naive path's n² memory
    beyond what was run (dotted), and ``limit`` marks where it stops fitting.
    """
    titles = {path: tr(title) for path, title in titles.items()}
    fig = go.Figure()
    for path, title in titles.items():
        mine = sorted((r for r in rows if r["path"] == path), key=lambda r: r["tokens"])
        if mine:
            fig.add_trace(
                go.Scatter(
                    x=[r["tokens"] for r in mine],
                    y=[max(r[metric], 1e-3) for r in mine],
                    name=title,
                    mode="lines+markers",
                    line={"color": COST_COLORS.get(path)},
                )
            )
    if predicted:
        fig.add_trace(
            go.Scatter(
                x=[n for n, _ in predicted],
                y=[mb for _, mb in predicted],
                name=t("figures.cost_predicted"),
                mode="lines",
                line={"color": COST_COLORS["naive"], "dash": "dot"},
            )
        )
    if limit:
        fig.add_vline(x=limit, line={"color": COST_COLORS["naive"], "dash": "dash"})
        fig.add_annotation(
            x=math.log10(limit),
            y=0.02,
            yref="paper",
            text=t("figures.cost_limit", limit=limit),
            showarrow=False,
            xanchor="right",
            yanchor="bottom",
        )
    sizes = sorted({r["tokens"] for r in rows} | ({limit} if limit else set()))
    fig.update_layout(
        height=420,
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        xaxis={
            "type": "log",
            "title": {"text": t("figures.cost_tokens")},
            "tickvals": sizes,
            "ticktext": [f"{n:,}" for n in sizes],
        },
        yaxis={
            "type": "log",
            "dtick": 1,
            "title": {"text": t("figures.cost_seconds") if metric == "seconds" else t("figures.cost_memory")},
        },
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def make_tiling_figure(steps: list, exact: Tensor) -> go.Figure:
    """Online softmax on one query row: each key block's scores, and the running max and normaliser after it.

    exact: (k_len,) the row's weights from a plain softmax; the tiled result's
    weights exp(s - m) / l use the final m and l and land on it exactly.
    """
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=(t("figures.tiling_scores"), t("figures.tiling_weights")),
    )
    m_final, l_final = steps[-1].m, steps[-1].l
    for i, step in enumerate(steps):
        keys = list(range(*step.block))
        fig.add_trace(
            go.Bar(
                x=keys,
                y=step.scores.numpy().astype(np.float32),
                name=t("figures.tiling_block", i=i, m=step.m, l=step.l),
                hovertemplate=t("figures.tiling_score_hover"),
            ),
            row=1,
            col=1,
        )
        tiled = torch.exp(step.scores - m_final) / l_final
        fig.add_trace(
            go.Bar(
                x=keys,
                y=tiled.numpy().astype(np.float32),
                showlegend=False,
                hovertemplate=t("figures.tiling_weight_hover"),
            ),
            row=2,
            col=1,
        )
    fig.add_trace(
        go.Scatter(
            x=list(range(len(exact))),
            y=exact.numpy().astype(np.float32),
            mode="lines+markers",
            name=t("figures.plain_softmax"),
            line={"color": "black"},
        ),
        row=2,
        col=1,
    )
    fig.update_layout(
        height=520,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        barmode="overlay",
        legend={"orientation": "h", "y": -0.12},
    )
    return fig

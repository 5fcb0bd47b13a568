"""The Padding page's figure: a batch's padding mask with the tokens written in."""

from __future__ import annotations

import plotly.graph_objects as go
import torch
from torch import Tensor

from attnviz.figures.base import MASKED_COLOR
from attnviz.i18n.translate import t


def make_padding_mask_figure(key_mask: Tensor, token_rows: list[list[str]]) -> go.Figure:
    """The batch's padding mask: key_mask (batch, T), True on real tokens; pads greyed, tokens written in."""
    keep = key_mask.to(torch.uint8).numpy()  # (batch, T)
    fig = go.Figure(
        go.Heatmap(
            z=keep,
            text=[[tok for tok in row] for row in token_rows],
            texttemplate="%{text}",
            zmin=0,
            zmax=1,
            colorscale=[[0.0, MASKED_COLOR], [0.5, MASKED_COLOR], [0.5, "#9ecae1"], [1.0, "#9ecae1"]],
            showscale=False,
            xgap=2,
            ygap=2,
            hovertemplate=t("figures.padding_hover"),
        )
    )
    fig.update_layout(
        height=int(min(600, 80 + 44 * len(token_rows))),
        margin={"l": 10, "r": 10, "t": 10, "b": 10},
        xaxis={"title": {"text": t("figures.position")}, "dtick": 1},
        yaxis={"autorange": "reversed", "dtick": 1, "title": {"text": t("figures.sentence")}},
    )
    return fig

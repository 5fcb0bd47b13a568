"""The Rollout page's figure: a token-to-token map of rollout, flow or one layer's head-averaged weights.

Built on :func:`attnviz.figures.base.make_head_heatmap_figure` (one float32 heatmap, tokens on both axes, masked
cells grey, cut tokens whole on hover), with the axes named for what they mean here: output tokens (after the
chosen layer) down the side, input tokens across the top.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from torch import Tensor

from attnviz.core.tokenizer import Token
from attnviz.figures.base import as_tensor, make_head_heatmap_figure
from attnviz.i18n.translate import t
from attnviz.labs.rollout import KINDS
from attnviz.models.record import token_labels


def make_rollout_figure(
    values: Tensor | np.ndarray,
    tokens: list[Token],
    *,
    kind: str,
    layer: int,
    mask: Tensor | None = None,
    gamma: float = 1.0,
) -> go.Figure:
    """One (T, T) map: row i an output token after layer ``layer``, column j an input token.

    values: (T, T) in [0, 1], rollout or flow (``kind`` "rollout" / "flow": through layers 0 … ``layer``) or the
    layer's head-averaged weights ("layer_mean"); tokens: the first T tokens (labels escaped by
    :func:`token_labels`); mask: bool (T, T), False where no path (or no key, for "layer_mean") joins the pair,
    drawn grey.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    w = as_tensor(values).detach().float().cpu()  # (T, T)
    if w.ndim != 2 or w.shape[0] != w.shape[1] or w.shape[0] != len(tokens):
        raise ValueError(f"values {tuple(w.shape)} do not match {len(tokens)} tokens")
    labels, whole = token_labels(tokens), token_labels(tokens, None)
    title = t(f"rollout_fig.title_{kind}", layer=layer, n=len(tokens))
    fig = make_head_heatmap_figure(w, labels, labels, title=title, gamma=gamma, mask=mask, q_hover=whole, k_hover=whole)
    what = t(f"rollout_fig.scale_{kind}")
    path = kind != "layer_mean"
    fig.data[0].hovertemplate = t("rollout_fig.hover_path" if path else "rollout_fig.hover_layer_mean", what=what)
    fig.data[0].colorbar.title.text = what
    rows = t("rollout_fig.output_axis" if path else "rollout_fig.query_axis", layer=layer)
    fig.update_layout(xaxis_title_text=t("rollout_fig.input_axis"), yaxis_title_text=rows)
    return fig

"""The Rollout page's figure: a token-to-token map of rollout, flow or one layer's head-averaged weights.

Built on :func:`attnviz.figures.base.make_head_heatmap_figure` (one float32 heatmap, tokens on both axes, masked
cells grey, cut tokens whole on hover), with the axes named for what they mean here: output tokens (after the
chosen layer) down the side, input tokens across the top.

Through many layers the mass gathers in the first token's column (rollout at SmolLM2's last layer puts 99.9 % of
every row there), so a scale from 0 to 1 draws everything else black. :func:`colour_scale` therefore tops the
scale at the largest value outside the first column (the first column saturates, and the caption says so), and
picks the colour mapping: linear, √ (the Heads page's ``gamma`` 0.5, :func:`attnviz.figures.base.weight_colorscale`)
or log over :data:`LOG_DECADES` decades, automatically when the mass concentrates, or as the reader chooses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from torch import Tensor

from attnviz.core.tokenizer import Token
from attnviz.figures.base import BASE_SCALE, N_STOPS, as_tensor, make_head_heatmap_figure, weight_colorbar
from attnviz.i18n.message import Message, msg
from attnviz.i18n.translate import t
from attnviz.labs.rollout import KINDS
from attnviz.models.record import token_labels

COLOURS = ("auto", "linear", "sqrt", "log")  # the reader's choices; "auto" resolves to one of the other three
GAMMA = {"linear": 1.0, "sqrt": 0.5}  # as the Heads page's √ weight colour
CONCENTRATED = 0.5  # the first column holding at least this share of the mass counts as concentrated
SQRT_SPREAD = 30.0  # the top this many times the median other value: most cells would be dark on a linear scale
LOG_SPREAD = 300.0  # ... and on a √ scale, where the mass concentrates too (or at ten times this, where not)
LOG_DECADES = 4  # a log scale spans this many decades below its top; smaller values get the lowest colour


@dataclass(frozen=True)
class ColourScale:
    """How a map's values become colours.

    mode: "linear", "sqrt" or "log"; chosen: what the reader asked for ("auto" or the mode); top: the value drawn
    at full colour (the largest outside the first column, or 1 where that is all); bottom: the value at the lowest
    colour of a log scale (0 otherwise); first_share: the first column's share of the mass on the map;
    spread: the top over the median positive value outside the first column; saturated: cells above ``top``
    (all in the first column); first_max: the largest value in the first column.
    """

    mode: str
    chosen: str
    top: float
    bottom: float
    first_share: float
    spread: float
    saturated: int
    first_max: float

    @property
    def gamma(self) -> float:
        return GAMMA.get(self.mode, 1.0)


def colour_scale(values: Tensor | np.ndarray, mask: Tensor | None = None, choice: str = "auto") -> ColourScale:
    """The colour scale of a (T, T) map of values in [0, 1] (``mask``: bool (T, T), False where no path joins the
    pair, left out).

    The top is the largest value outside the first column (1 on a one-token map, or where nothing else is
    positive). "auto" gives log where the first column holds at least :data:`CONCENTRATED` of the mass and the top
    is :data:`LOG_SPREAD` times the median other value or more (or ten times that without the concentration), √
    where the mass concentrates or the spread passes :data:`SQRT_SPREAD`, else linear.
    """
    if choice not in COLOURS:
        raise ValueError(f"colour must be one of {', '.join(COLOURS)}, not {choice!r}")
    w = as_tensor(values).detach().double().cpu().clamp(0.0, 1.0)  # (T, T)
    shown = mask.cpu().expand(w.shape) if mask is not None else w.new_ones(w.shape, dtype=bool)
    w = w.masked_fill(~shown, 0.0)
    total = float(w.sum())
    first = w[:, 0]
    rest = w[:, 1:][shown[:, 1:]]
    positive = rest[rest > 0]
    top = float(positive.max()) if positive.numel() else 1.0
    first_max = float(first.max()) if first.numel() else 0.0
    spread = top / float(positive.median()) if positive.numel() else 1.0
    share = float(first.sum()) / total if total > 0 else 0.0
    mode = choice
    if choice == "auto":
        concentrated = share >= CONCENTRATED and positive.numel() > 0  # with nothing else, nothing to lift
        if spread >= LOG_SPREAD * (1 if concentrated else 10):
            mode = "log"
        else:
            mode = "sqrt" if concentrated or spread >= SQRT_SPREAD else "linear"
    bottom = top * 10.0**-LOG_DECADES if mode == "log" else 0.0
    return ColourScale(mode, choice, top, bottom, share, spread, int((w > top).sum()), first_max)


def log_colorscale(bottom: float, top: float) -> list[list]:
    """Colour stops over values in [0, top] (positions as fractions of ``top``) that give a value v the base
    colour at log(v / bottom) / log(top / bottom), clamped to [0, 1]: :data:`~attnviz.figures.base.N_STOPS`
    stops spaced evenly in log, and 0 at the lowest colour."""
    if not 0 < bottom < top:
        raise ValueError(f"a log scale needs 0 < bottom ({bottom}) < top ({top})")
    levels = np.linspace(0.0, 1.0, N_STOPS)
    colors = sample_colorscale(BASE_SCALE, list(levels))
    ratio = bottom / top
    return [[0.0, colors[0]]] + [
        [float(ratio ** (1.0 - level)), color] for level, color in zip(levels, colors, strict=True)
    ]


def colour_bar(scale: ColourScale) -> dict:
    """The colour bar's ticks: for linear and √ the Heads page's weights scaled to the top (the bar runs in values);
    for log the decades, on a bar that runs in log10 of the values (:func:`make_rollout_figure` draws it apart)."""
    bar = weight_colorbar(scale.gamma)
    if scale.mode == "log":
        low, high = math.log10(scale.bottom), math.log10(scale.top)
        ticks = [float(k) for k in range(math.ceil(low), math.floor(high) + 1)]
        labels = [f"{10.0**k:.0e}" for k in ticks]
    else:
        ticks = [tick * scale.top for tick in bar["tickvals"]]
        labels = ["0" if tick == 0 else f"{tick:.2g}" for tick in ticks]
    return {**bar, "tickvals": ticks, "ticktext": labels}


def colour_note(scale: ColourScale) -> Message:
    """What the caption says of the colours: the mapping (and why, when automatic) and what saturates."""
    mode = msg(f"rollout_fig.colour_{scale.mode}", bottom=f"{scale.bottom:.1e}", top=f"{scale.top:.2g}")
    why = "auto" if scale.chosen == "auto" else "chosen"
    if scale.saturated:
        return msg(
            f"rollout_fig.colour_note_{why}_saturated",
            mode=mode,
            share=scale.first_share,
            top=f"{scale.top:.2g}",
            n=scale.saturated,
            first_max=f"{scale.first_max:.3g}",
        )
    return msg(f"rollout_fig.colour_note_{why}", mode=mode, share=scale.first_share)


def make_rollout_figure(
    values: Tensor | np.ndarray,
    tokens: list[Token],
    *,
    kind: str,
    layer: int,
    mask: Tensor | None = None,
    colour: ColourScale | str = "auto",
) -> go.Figure:
    """One (T, T) map: row i an output token after layer ``layer``, column j an input token.

    values: (T, T) in [0, 1], rollout or flow (``kind`` "rollout" / "flow": through layers 0 … ``layer``) or the
    layer's head-averaged weights ("layer_mean"); tokens: the first T tokens (labels escaped by
    :func:`token_labels`); mask: bool (T, T), False where no path (or no key, for "layer_mean") joins the pair,
    drawn grey; colour: a :class:`ColourScale`, or a choice in :data:`COLOURS` for :func:`colour_scale` to
    resolve. Hover shows every value as it is, saturated or not.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    w = as_tensor(values).detach().float().cpu()  # (T, T)
    if w.ndim != 2 or w.shape[0] != w.shape[1] or w.shape[0] != len(tokens):
        raise ValueError(f"values {tuple(w.shape)} do not match {len(tokens)} tokens")
    scale = colour if isinstance(colour, ColourScale) else colour_scale(w, mask, colour)
    labels, whole = token_labels(tokens), token_labels(tokens, None)
    title = t(f"rollout_fig.title_{kind}", layer=layer, n=len(tokens))
    fig = make_head_heatmap_figure(
        w, labels, labels, title=title, gamma=scale.gamma, mask=mask, q_hover=whole, k_hover=whole
    )
    fig.update_traces(zmin=0.0, zmax=scale.top, selector={"type": "heatmap"})
    what = t(f"rollout_fig.scale_{kind}")
    path = kind != "layer_mean"
    fig.data[0].hovertemplate = t("rollout_fig.hover_path" if path else "rollout_fig.hover_layer_mean", what=what)
    bar = {**colour_bar(scale), "title": {"text": t(f"rollout_fig.bar_{scale.mode}", what=what)}}
    if scale.mode == "log":  # linear and √ are the Heads page's colours, which the heatmap already has
        fig.update_traces(colorscale=log_colorscale(scale.bottom, scale.top), selector={"type": "heatmap"})
        fig.data[0].showscale = False
        # the cells keep their values (hover shows them); the bar, a point-less trace's, runs in log10 of them
        levels = np.linspace(0.0, 1.0, N_STOPS)
        even = [[float(x), c] for x, c in zip(levels, sample_colorscale(BASE_SCALE, list(levels)), strict=True)]
        low, high = math.log10(scale.bottom), math.log10(scale.top)
        key = go.Scatter(
            x=[None],
            y=[None],
            mode="markers",
            marker={"color": [low], "cmin": low, "cmax": high, "colorscale": even, "showscale": True, "colorbar": bar},
            hoverinfo="skip",
            showlegend=False,
            name="colour key",
        )
        fig.add_trace(key)
    else:
        fig.data[0].colorbar = bar
    rows = t("rollout_fig.output_axis" if path else "rollout_fig.query_axis", layer=layer)
    fig.update_layout(xaxis_title_text=t("rollout_fig.input_axis"), yaxis_title_text=rows)
    return fig

"""Figures for one token's attention: the text coloured by weight, a page of running text, where the
weight lies around that page and across the whole text, and BertViz-style lines.

All are sized for the wire. The coloured text sends each weight as one uint8
colour level (255 marks a masked cell, drawn grey) on a scale up to the largest
weight shown, the exact weight as float32 for the hover, and each token's full
text once, as the x category; the cells show the text cut to :data:`CELL_CHARS`.
The line view draws only the weights above a threshold, batched into a few
opacity levels per head.
"""

from __future__ import annotations

import colorsys
import itertools
import math

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.colors import sample_colorscale
from torch import Tensor

from attnviz.core.token_display import plain_text
from attnviz.figures.base import hover_text
from attnviz.i18n.translate import t, tr
from attnviz.labs.token_view import PooledOverview, WindowShare

CELL_CHARS = 12  # a token's text inside a cell is cut to this many characters, with an ellipsis
TEXT_TOKENS = 40  # beyond this many tokens the cells are too narrow for text: hover only (the running text reads)
MASKED_LEVEL = 255  # the uint8 level of a masked cell; weights use 0..254
MASKED_COLOR = "#d4d4d4"
LINE_THRESHOLD = 0.02
LINE_LEVELS = (0.02, 0.1, 0.25, 0.5)  # lower edges of the opacity bands of the line view
CLICK_CELLS = 40_000  # up to this many cells get a point each that takes hover and clicks (a page of text does)
FOCUS_COLOR = "#e4572e"
LINE_CHARS = 96  # the running text wraps at this many characters a line
RUN_CHARS = 24  # a token's text in the running text is cut to this many characters
LEGEND_SWATCH = 12  # px: a head's legend marker in the line view


def head_colors(n_head: int) -> list[str]:
    """``n_head`` distinct colours, one per head: hues spread evenly, on two or three tones (lightness and
    saturation) once there are more heads than a hue circle keeps apart (over 12). Consecutive heads take
    hues far apart, so H4 and H5 never look alike."""
    if n_head < 1:
        raise ValueError(f"n_head ({n_head}) must be at least 1")
    tones = [(0.45, 0.85)] if n_head <= 12 else [(0.42, 0.9), (0.65, 0.75), (0.28, 0.7)][: -(-n_head // 12)]
    per_tone = -(-n_head // len(tones))
    stride = next(s for s in range(max(1, round(per_tone * 0.38)), per_tone + 1) if math.gcd(s, per_tone) == 1)
    colors = []
    for head in range(n_head):
        tone, step = head % len(tones), (head // len(tones) * stride) % per_tone
        lightness, saturation = tones[tone]
        hue = (step / per_tone + tone / (len(tones) * per_tone)) % 1.0
        r, g, b = colorsys.hls_to_rgb(hue, lightness, saturation)
        colors.append(f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}")
    return colors


def cell_text(text: str, limit: int = CELL_CHARS) -> str:
    """A token's text for a cell: cut to ``limit`` characters (the last an ellipsis), escaped for plotly."""
    return plain_text(text if len(text) <= limit else text[: limit - 1] + "…")


def axis_names(texts: list[str]) -> list[str]:
    """Unique, escaped full names "index text", one per token: categories, read on hover (long ones wrapped)."""
    return [hover_text(f"{i} {text}") for i, text in enumerate(texts)]


def clicked_token(selection) -> int | None:
    """The token a click on a coloured-text or running-text figure chose; None if none.

    Their clickable points carry (token index, weight) as customdata; a point without it is read by its
    x category, "index text".
    """
    try:
        point = selection["selection"]["points"][0]
    except (KeyError, IndexError, TypeError):
        return None
    try:
        data = point["customdata"]
        return int(data["0"] if isinstance(data, dict) else data[0])  # a typed array's row comes as {"0": .., "1": ..}
    except (KeyError, IndexError, TypeError, ValueError):
        pass
    try:
        return int(str(point["x"]).split(" ", 1)[0])
    except (KeyError, TypeError, ValueError):
        return None


def text_colorscale() -> list[list]:
    """Viridis over levels 0..254, grey at 255 (masked)."""
    top = (MASKED_LEVEL - 1) / MASKED_LEVEL
    levels = np.linspace(0.0, 1.0, 17)
    colors = sample_colorscale("Viridis", list(levels))
    return [[float(level * top), color] for level, color in zip(levels, colors, strict=True)] + [
        [(MASKED_LEVEL - 0.5) / MASKED_LEVEL, MASKED_COLOR],
        [1.0, MASKED_COLOR],
    ]


def colour_top(weights: Tensor) -> float:
    """The weight the colour scale ends at: the largest one shown, so a long text's small weights still
    differ in colour (1 when nothing is shown)."""
    top = weights.detach().float().nan_to_num(0.0).max() if weights.numel() else torch.tensor(0.0)
    return float(top) if float(top) > 0 else 1.0


def quantize_text_weights(weights: Tensor, top: float = 1.0) -> np.ndarray:
    """Weights in [0, top] (NaN = masked) -> uint8 levels round(254 * w / top), 255 where masked."""
    w = weights.detach().float().cpu()
    levels = (w.nan_to_num(0.0).div(top).clamp(0.0, 1.0) * (MASKED_LEVEL - 1)).round().to(torch.uint8)
    return levels.masked_fill(w.isnan(), MASKED_LEVEL).numpy()


def level_colorbar(top: float, label: str | None = None) -> dict:
    """A colour bar over the uint8 levels, labelled in weights from 0 to ``top`` (``label``: what else it shows)."""
    ticks = np.linspace(0.0, top, 5)
    return {
        "title": {"text": label or t("figures.weight")},
        "tickvals": [float(tick / top * (MASKED_LEVEL - 1)) for tick in ticks],
        "ticktext": [f"{tick:.3g}" for tick in ticks],
        "thickness": 12,
        "len": 1.0,
        "lenmode": "fraction",
    }


def make_coloured_text_figure(
    weights: Tensor,
    labels: list[str],
    focus: int | None = None,
    *,
    first: int = 0,
    row_names: list[str] | None = None,
    title: str = "",
    scale_label: str | None = None,
) -> go.Figure:
    """The text itself, each token's background its weight, one row per head (or per layer): CircuitsVis style.

    ``scale_label`` names what the colours show when it is not the weight (value-weighted attention).

    weights: (n_row, T), NaN where masked (drawn grey); labels: the T tokens' full
    text (cut in the cells, whole on hover); ``first``: the index of the first
    token shown (a page of a longer text); focus: the chosen token's index,
    outlined. Colours run from 0 to the largest weight shown, with a colour bar.
    Up to :data:`CLICK_CELLS` cells get an invisible point each that shows the
    numbers on hover and takes the click (Streamlit's selection events come from
    points, not heatmaps); past that, the heatmap itself hovers.
    """
    w = weights.detach().float().cpu()
    if w.ndim != 2 or w.shape[1] != len(labels):
        raise ValueError(f"weights {tuple(w.shape)} do not match (n_row, {len(labels)} labels)")
    n_row, n_tok = w.shape
    row_names = row_names or [f"H{h}" for h in range(n_row)]
    if len(row_names) != n_row:
        raise ValueError(f"{len(row_names)} row names for {n_row} rows")
    show_text = n_tok <= TEXT_TOKENS
    clickable = n_row * n_tok <= CLICK_CELLS
    top = colour_top(w)
    names = [hover_text(f"{first + i} {text}") for i, text in enumerate(labels)]
    exact = w.numpy().astype(np.float32)  # (n_row, T)
    heatmap = go.Heatmap(
        z=quantize_text_weights(w, top),
        x=names,
        y=row_names,
        zmin=0,
        zmax=MASKED_LEVEL,
        colorscale=text_colorscale(),
        colorbar=level_colorbar(top, scale_label),
        customdata=exact,
        hovertemplate=t("token_view_fig.text_hover"),
        hoverinfo="skip" if clickable else None,
        xgap=1 if show_text else 0,  # a gap on a sub-pixel cell would paint the whole text grey
        ygap=1,
    )
    if show_text:
        heatmap.update(
            text=[[cell_text(text) for text in labels]] * n_row, texttemplate="%{text}", textfont={"size": 11}
        )
    fig = go.Figure(heatmap)
    if clickable:
        index = np.tile(np.arange(first, first + n_tok, dtype=np.float32), n_row)  # (n_row * T,)
        fig.add_trace(
            go.Scatter(
                x=[name for _ in range(n_row) for name in names],
                y=[row for row in row_names for _ in range(n_tok)],
                mode="markers",
                marker={"symbol": "square", "size": 22, "opacity": 0},
                customdata=np.stack([index, exact.reshape(-1)], axis=1),  # (n_row * T, 2): token, weight
                hovertemplate=t("token_view_fig.point_hover"),
                showlegend=False,
            )
        )
    if focus is not None and first <= focus < first + n_tok:
        fig.add_shape(
            type="rect",
            x0=focus - first - 0.5,
            x1=focus - first + 0.5,
            y0=-0.5,
            y1=n_row - 0.5,
            line={"color": FOCUS_COLOR, "width": 3},
        )
    fig.update_layout(
        title={"text": tr(title)},
        height=int(min(900, 110 + 30 * n_row)),
        plot_bgcolor=MASKED_COLOR,
        margin={"l": 10, "r": 10, "t": 40 if title else 10, "b": 10},
        # fixed ranges: the invisible points' markers would otherwise pad the axes with grey
        xaxis={
            "type": "category",
            "showticklabels": not show_text,
            "tickangle": -60,
            "title": None,
            "range": [-0.5, n_tok - 0.5],
        },
        yaxis={"type": "category", "range": [n_row - 0.5, -0.5]},
    )
    return fig


def running_lines(labels: list[str], line_chars: int = LINE_CHARS) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Lay tokens out as wrapped text: each token's line, its first character's column, and its shown text.

    A token is as wide as its text (cut to :data:`RUN_CHARS`) plus one space; a line
    breaks before a token that would pass ``line_chars``, and after a newline (⏎).
    """
    shown = [cell_text(text, RUN_CHARS) for text in labels]
    lines = np.zeros(len(labels), dtype=np.int32)
    columns = np.zeros(len(labels), dtype=np.int32)
    line, column = 0, 0
    for i, text in enumerate(labels):
        width = min(len(text), RUN_CHARS) + 1
        if column and column + width > line_chars:
            line, column = line + 1, 0
        lines[i], columns[i] = line, column
        column += width
        if "⏎" in text:
            line, column = line + 1, 0
    return lines, columns, shown


def make_running_text_figure(
    weights: Tensor,
    labels: list[str],
    focus: int | None = None,
    *,
    first: int = 0,
    share: tuple[float, float] | None = None,
    line_chars: int = LINE_CHARS,
    title: str = "",
    scale_label: str | None = None,
) -> go.Figure:
    """A page of the text as it reads, wrapped in lines, each token on its weight's colour (``scale_label``: what
    the colours show when not the weight).

    weights: (T,) one row (a head, or the mean), NaN where masked (grey); labels:
    the T tokens' full text (whole on hover); ``first``: the index of the first
    token; ``share``: the weight before and after the page, named at its ends.
    Each token is a bar, so hover shows its weight, a click picks it (its
    customdata is (token, weight)) and the colour bar reads in weights.
    """
    w = weights.detach().float().cpu()
    if w.ndim != 1 or w.shape[0] != len(labels):
        raise ValueError(f"weights {tuple(w.shape)} do not match ({len(labels)} labels,)")
    n_tok = len(labels)
    top = colour_top(w)
    levels = quantize_text_weights(w[None], top)[0]  # (T,)
    lines, columns, shown = running_lines(labels, line_chars)
    widths = np.array([min(len(text), RUN_CHARS) + 1 for text in labels], dtype=np.float32)
    index = np.arange(first, first + n_tok, dtype=np.float32)
    ink = np.where((levels < 150) | (levels == MASKED_LEVEL), "white", "black")
    ink[levels == MASKED_LEVEL] = "black"
    is_focus = index == (focus if focus is not None else -1)
    fig = go.Figure(
        go.Bar(
            orientation="h",
            y=lines,
            x=widths - 0.2,
            base=columns,
            width=0.85,
            text=shown,
            textposition="inside",
            insidetextanchor="middle",
            textangle=0,
            textfont={"family": "monospace", "size": 13, "color": ink.tolist()},
            marker={
                "color": levels,
                "colorscale": text_colorscale(),
                "cmin": 0,
                "cmax": MASKED_LEVEL,
                "colorbar": level_colorbar(top, scale_label),
                "line": {"color": FOCUS_COLOR, "width": np.where(is_focus, 3, 0).tolist()},
            },
            customdata=np.stack([index, w.numpy().astype(np.float32)], axis=1),  # (T, 2): token, weight
            hovertext=[hover_text(f"{first + i} {text}") for i, text in enumerate(labels)],
            hovertemplate=t("token_view_fig.run_hover"),
            showlegend=False,
        )
    )
    n_lines = int(lines[-1]) + 1 if n_tok else 1
    if share is not None:
        before, after = share
        fig.add_annotation(
            x=0,
            y=-0.75,
            xanchor="left",
            yanchor="bottom",
            showarrow=False,
            text=plain_text(t("token_view_fig.before", weight=before)),
        )
        fig.add_annotation(
            x=line_chars,
            y=n_lines - 0.25,
            xanchor="right",
            yanchor="top",
            showarrow=False,
            text=plain_text(t("token_view_fig.after", weight=after)),
        )
    fig.update_layout(
        title={"text": tr(title)},
        height=int(min(1400, 90 + 26 * (n_lines + 1))),
        barmode="overlay",
        bargap=0,
        uniformtext={"mode": "show", "minsize": 11},
        plot_bgcolor="white",
        margin={"l": 10, "r": 10, "t": 40 if title else 10, "b": 10},
        xaxis={"visible": False, "range": [-0.5, line_chars + 0.5]},
        yaxis={"visible": False, "range": [n_lines + 0.1, -1.1], "type": "linear"},
    )
    return fig


def make_window_share_figure(share: WindowShare, row_names: list[str], *, title: str = "") -> go.Figure:
    """Per row, the weight before the page, on it and after it, as stacked bars with their numbers."""
    if len(row_names) != len(share.inside):
        raise ValueError(f"{len(row_names)} row names for {len(share.inside)} rows")
    parts = (
        (share.before, t("token_view_fig.share_before", start=share.start), "#8da0cb"),
        (share.inside, t("token_view_fig.share_inside", start=share.start, last=share.stop - 1), FOCUS_COLOR),
        (share.after, t("token_view_fig.share_after", stop=share.stop), "#66c2a5"),
    )
    fig = go.Figure()
    for values, name, color in parts:
        v = values.float().numpy()
        fig.add_trace(
            go.Bar(
                orientation="h",
                y=row_names,
                x=v,
                name=name,
                marker={"color": color},
                text=[f"{x:.3f}" for x in v],
                textposition="inside",
                insidetextanchor="middle",
                hovertemplate="%{y}<br>" + plain_text(name).replace("%", "&#37;") + ": %{x:.5f}<extra></extra>",
            )
        )
    fig.update_layout(
        title={"text": tr(title)},
        barmode="stack",
        height=int(min(900, 110 + 20 * len(row_names))),
        margin={"l": 10, "r": 10, "t": 80 if title else 40, "b": 10},
        uniformtext={"mode": "hide", "minsize": 9},
        yaxis={"type": "category", "autorange": "reversed"},
        xaxis={"title": {"text": t("token_view_fig.summed_weight")}},
        legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0, "traceorder": "normal"},
    )
    return fig


def make_pooled_overview_figure(
    pooled: PooledOverview,
    row_names: list[str],
    *,
    window: tuple[int, int] | None = None,
    focus: int | None = None,
    title: str = "",
) -> go.Figure:
    """The whole text at once: one row per head, each column a bin of tokens coloured by the weight it holds.

    The x axis is in token positions (a bin sits over the tokens it sums); ``window``
    (start, stop) is outlined, ``focus`` marked by a line. NaN (a bin all masked) is grey.
    """
    sums = pooled.sums.float().numpy()  # (n_row, n_bin)
    if len(row_names) != sums.shape[0]:
        raise ValueError(f"{len(row_names)} row names for {sums.shape[0]} rows")
    edges = np.asarray(pooled.edges, dtype=np.float32)
    centres = (edges[:-1] + edges[1:] - 1) / 2
    spans = np.stack([edges[:-1], edges[1:] - 1], axis=1)  # (n_bin, 2): first and last token of each bin
    top = float(np.nanmax(sums)) if np.isfinite(sums).any() and np.nanmax(sums) > 0 else 1.0
    fig = go.Figure(
        go.Heatmap(
            z=sums.astype(np.float32),
            x=centres,
            y=row_names,
            zmin=0,
            zmax=top,
            colorscale="Viridis",
            colorbar={"title": {"text": t("token_view_fig.summed_weight")}, "thickness": 12},
            customdata=np.broadcast_to(spans, (*sums.shape, 2)),
            hovertemplate=t("token_view_fig.bin_hover"),
            ygap=1,
        )
    )
    n_row = sums.shape[0]
    if window is not None:
        fig.add_shape(
            type="rect",
            x0=window[0] - 0.5,
            x1=window[1] - 0.5,
            y0=-0.5,
            y1=n_row - 0.5,
            line={"color": "white", "width": 2},
        )
    if focus is not None:
        fig.add_shape(type="line", x0=focus, x1=focus, y0=-0.5, y1=n_row - 0.5, line={"color": FOCUS_COLOR, "width": 2})
    fig.update_layout(
        title={"text": tr(title)},
        height=int(min(700, 110 + 18 * n_row)),
        plot_bgcolor=MASKED_COLOR,
        margin={"l": 10, "r": 10, "t": 40 if title else 10, "b": 10},
        xaxis={"title": {"text": t("token_view_fig.position")}, "range": [-0.5, float(edges[-1]) - 0.5]},
        yaxis={"type": "category", "autorange": "reversed"},
    )
    return fig


def _segments(pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, 2) (query, key) pairs -> x, y arrays of lines from (0, -query) to (1, -key), NaN between lines."""
    n = len(pairs)
    x = np.tile(np.array([0.0, 1.0, np.nan], dtype=np.float32), n)
    y = np.full(3 * n, np.nan, dtype=np.float32)
    y[0::3], y[1::3] = -pairs[:, 0], -pairs[:, 1]
    return x, y


def make_line_view_figure(
    weights: Tensor,
    labels: list[str],
    heads_on: list[int] | None = None,
    *,
    focus: int | None = None,
    direction: str = "attends_to",
    threshold: float = LINE_THRESHOLD,
) -> go.Figure:
    """BertViz's head view: queries on the left, keys on the right, a line per weight, one colour per head.

    weights: (n_head, T, T), NaN where masked. Lines below ``threshold`` are not
    drawn; the rest fall into opacity bands (:data:`LINE_LEVELS`), one trace per
    head and band, grouped so that a head's legend entry toggles all its lines.
    ``heads_on`` are drawn at first (default: all); ``focus`` keeps only the lines
    of one token (its row for "attends_to", its column for "attended_by").
    """
    w = weights.detach().float().cpu()
    if w.ndim != 3 or w.shape[1:] != (len(labels), len(labels)):
        raise ValueError(f"weights {tuple(w.shape)} do not match (n_head, {len(labels)}, {len(labels)})")
    n_head, n_tok = w.shape[0], len(labels)
    heads_on = list(range(n_head)) if heads_on is None else heads_on
    if focus is not None:
        keep = torch.zeros(n_tok, n_tok, dtype=torch.bool)
        if direction == "attends_to":
            keep[focus, :] = True
        else:
            keep[:, focus] = True
        w = w.masked_fill(~keep, float("nan"))
    edges = [max(threshold, LINE_LEVELS[0]), *LINE_LEVELS[1:], float("inf")]
    colors = head_colors(n_head)
    fig = go.Figure()
    for head in range(n_head):
        shown = True if head in heads_on else "legendonly"
        # the legend entry is a marker of its own: a band's thin, faint line would make a faint swatch
        fig.add_trace(
            go.Scatter(
                x=[np.nan],
                y=[np.nan],
                mode="markers",
                marker={"color": colors[head], "size": LEGEND_SWATCH, "symbol": "square"},
                name=f"H{head}",
                legendgroup=f"H{head}",
                visible=shown,
                hoverinfo="skip",
            )
        )
        for band, (low, high) in enumerate(itertools.pairwise(edges)):
            pairs = ((w[head] >= low) & (w[head] < high)).nonzero().numpy()  # (n, 2) (query, key)
            if not len(pairs):
                continue
            x, y = _segments(pairs)
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    mode="lines",
                    line={"color": colors[head], "width": 1 + 1.5 * band},
                    opacity=0.25 + 0.25 * band,
                    name=f"H{head}",
                    legendgroup=f"H{head}",
                    showlegend=False,
                    visible=shown,
                    hoverinfo="skip",
                )
            )
    positions = -np.arange(n_tok, dtype=np.float32)
    names = axis_names(labels)
    shown = [cell_text(text) for text in labels]
    sides = ((0.0, "middle left", t("token_view_fig.query")), (1.0, "middle right", t("token_view_fig.key")))
    for side, (x, anchor, role) in enumerate(sides):
        fig.add_trace(
            go.Scatter(
                x=np.full(n_tok, x, dtype=np.float32),
                y=positions,
                mode="text+markers",
                marker={"size": 4, "color": "#444"},
                text=shown,
                textposition=anchor,
                customdata=names,
                hovertemplate=f"{role} %{{customdata}}<extra></extra>",
                name=t("token_view_fig.queries") if side == 0 else t("token_view_fig.keys"),
                showlegend=False,
            )
        )
    if focus is not None:
        fig.add_shape(
            type="rect",
            x0=-0.02 if direction == "attends_to" else 0.98,
            x1=0.02 if direction == "attends_to" else 1.02,
            y0=-focus - 0.4,
            y1=-focus + 0.4,
            line={"color": "#e4572e", "width": 2},
        )
    fig.update_layout(
        height=int(min(1400, 120 + 20 * n_tok)),
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        plot_bgcolor="white",
        xaxis={"visible": False, "range": [-0.6, 1.6]},
        yaxis={"visible": False, "range": [-n_tok + 0.5, 0.5]},
        legend={"title": {"text": t("token_view_fig.heads_legend")}, "itemsizing": "constant"},
    )
    return fig

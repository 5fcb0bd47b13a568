"""Figures for a corpus run: every head placed on two metrics, its spread across the texts shown.

A corpus run's summary (:mod:`attnviz.labs.corpus`, ``summary.json``) gives each head's mean, standard deviation,
minimum and maximum of every statistic over the texts it read, and the probe gives each head one induction and
one copying score (one number, no spread). :func:`head_metrics` puts both in one frame, one row a head;
:func:`make_corpus_scatter_figure` draws it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attnviz.figures.base import hover_text
from attnviz.figures.heads import stat_name
from attnviz.i18n.translate import t

HEAD_KEYS = ("stack", "kind", "layer", "head")  # what names a head (stack and kind: encoder-decoders only)
PROBE_METRICS = ("induction", "copying", "duplicate")  # the probe's scores: one number a head, no spread
SPREAD = ("mean", "std", "min", "max")
# layers coloured from dark blue (first) through green and orange to dark red (last): no stop pale on white
LAYER_SCALE = [[0.0, "#313695"], [0.25, "#2c7fb8"], [0.5, "#1a9850"], [0.75, "#e66101"], [1.0, "#a50026"]]
ERROR_COLOR = "rgba(90, 90, 90, 0.45)"


def head_metrics(heads: Sequence[Mapping], probe: pd.DataFrame | None = None) -> pd.DataFrame:
    """The summary's per-head entries (``summary["heads"]``) -> one row a head: its keys, ``n_texts``, and for each
    statistic ``S`` the columns ``S`` (its mean over the texts), ``S_std``, ``S_min`` and ``S_max``; with the
    probe's rows, its scores as columns of their own (no spread). Entries written either way are read: a statistic
    as ``{"mean": .., "std": ..}`` or as ``S_mean``, ``S_std`` fields."""
    rows = []
    for entry in heads:
        row = {key: entry[key] for key in HEAD_KEYS if key in entry}
        row["n_texts"] = int(entry.get("n_texts", 0))
        row["flags"] = dict(entry.get("flags") or {})  # on how many texts each flag was raised
        for name, value in entry.items():
            if isinstance(value, Mapping) and "mean" in value:
                for part in SPREAD:
                    row[name if part == "mean" else f"{name}_{part}"] = _number(value.get(part))
            elif name.endswith("_mean"):
                row[name.removesuffix("_mean")] = _number(value)
            elif any(name.endswith(f"_{part}") for part in SPREAD[1:]) and name not in row:
                row[name] = _number(value)
        rows.append(row)
    frame = pd.DataFrame(rows)
    if probe is not None and len(probe) and len(frame):
        keys = [key for key in HEAD_KEYS if key in frame.columns and key in probe.columns]
        scores = [c for c in PROBE_METRICS if c in probe.columns]
        frame = frame.merge(probe[[*keys, *scores]], on=keys, how="left")
    return frame


def _number(value) -> float:
    """A JSON number (null for NaN) as a float."""
    return math.nan if value is None else float(value)


def metric_columns(metrics: pd.DataFrame) -> list[str]:
    """The metrics a head can be placed on: each statistic's mean, then the probe's scores."""
    spread = {f"{c}_{part}" for c in metrics.columns for part in SPREAD[1:]}
    return [c for c in metrics.columns if c not in (*HEAD_KEYS, "n_texts", "flags") and c not in spread]


def metric_name(column: str) -> str:
    """A metric named in the reader's language (a statistic's own name, the probe's scores)."""
    if column in PROBE_METRICS:
        return t(f"corpus_fig.{column}")
    return stat_name(column)


def head_name(row: Mapping) -> str:
    """ "L3 H5", with the stack and kind first for an encoder-decoder ("decoder cross L3 H5")."""
    where = " ".join(str(row[key]) for key in ("stack", "kind") if isinstance(row.get(key), str) and row.get(key))
    name = f"L{int(row['layer'])} H{int(row['head'])}"
    return f"{where} {name}" if where else name


def _spread(metrics: pd.DataFrame, column: str) -> np.ndarray:
    """A metric's standard deviation across the texts, NaN (no bar) for a metric with none (the probe's)."""
    std = f"{column}_std"
    return metrics[std].to_numpy(float) if std in metrics.columns else np.full(len(metrics), np.nan)


def _value(mean: float, std: float) -> str:
    return f"{mean:.3f}" if math.isnan(std) else f"{mean:.3f} ± {std:.3f}"


def make_corpus_scatter_figure(
    metrics: pd.DataFrame, x: str, y: str, *, selected: Mapping | None = None, title: str | None = None
) -> go.Figure:
    """Each head a point at (mean of ``x``, mean of ``y``) over the texts, with error bars of one standard deviation
    each way, coloured by layer; hover: the head's name, both values ± their spread, and how many texts it read.
    ``selected`` (a head's keys) is ringed. The points' ``customdata`` rows are the heads' index in ``metrics``."""
    x_std, y_std = _spread(metrics, x), _spread(metrics, y)
    names = [head_name(row) for row in metrics.to_dict("records")]
    x_mean, y_mean = metrics[x].to_numpy(float), metrics[y].to_numpy(float)
    hover = [
        f"<b>{hover_text(name)}</b><br>{metric_name(x)}: {_value(xm, xs)}<br>{metric_name(y)}: {_value(ym, ys)}"
        f"<br>{t('corpus_fig.n_texts', n=int(n))}"
        for name, xm, xs, ym, ys, n in zip(names, x_mean, x_std, y_mean, y_std, metrics["n_texts"], strict=True)
    ]
    n_layer = int(metrics["layer"].max()) + 1 if len(metrics) else 1
    fig = go.Figure(
        go.Scatter(
            x=x_mean,
            y=y_mean,
            mode="markers",
            customdata=[[i] for i in range(len(metrics))],  # a list a point: the selection event carries it
            text=hover,
            hovertemplate="%{text}<extra></extra>",
            error_x={"type": "data", "array": x_std, "visible": True, "color": ERROR_COLOR, "thickness": 1},
            error_y={"type": "data", "array": y_std, "visible": True, "color": ERROR_COLOR, "thickness": 1},
            marker={
                "size": 9,
                "color": metrics["layer"].to_numpy(int),
                "colorscale": LAYER_SCALE,
                "cmin": 0,
                "cmax": max(1, n_layer - 1),
                "line": {"width": 0.5, "color": "white"},
                "colorbar": {"title": {"text": t("corpus_fig.layer")}, "thickness": 14},
            },
            name=t("corpus_fig.heads"),
            showlegend=False,
        )
    )
    if selected is not None:
        chosen = _rows_of(metrics, selected)
        fig.add_trace(
            go.Scatter(
                x=x_mean[chosen],
                y=y_mean[chosen],
                mode="markers",
                marker={"size": 18, "color": "rgba(0,0,0,0)", "line": {"width": 2.5, "color": "black"}},
                hoverinfo="skip",
                showlegend=False,
            )
        )
    fig.update_layout(
        title=t("corpus_fig.title", x=metric_name(x), y=metric_name(y), n=len(metrics)) if title is None else title,
        xaxis_title=metric_name(x),
        yaxis_title=metric_name(y),
        height=560,
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
        clickmode="event+select",
        dragmode=False,  # a click on a point chooses its head (a drag would zoom, and a click there select nothing)
    )
    return fig


def _rows_of(metrics: pd.DataFrame, head: Mapping) -> np.ndarray:
    """The rows of ``metrics`` that are ``head`` (its layer, head and, where given, stack and kind)."""
    hit = np.ones(len(metrics), dtype=bool)
    for key in HEAD_KEYS:
        if key in metrics.columns and head.get(key) is not None:
            hit &= (metrics[key] == head[key]).to_numpy()
    return np.flatnonzero(hit)


def filter_heads(
    metrics: pd.DataFrame,
    *,
    layers: tuple[int, int] | None = None,
    min_texts: int = 0,
    stack: str | None = None,
    kind: str | None = None,
    flags: Sequence[str] = (),
    flag_share: Mapping[str, np.ndarray] | None = None,
) -> pd.DataFrame:
    """The heads kept by the page's filters: a layer range (inclusive), a minimum of texts read, one stack and kind
    (encoder-decoders), and flags: a head is kept when, for every flag asked, ``flag_share[flag]`` (the share of
    its texts it was flagged on, aligned with ``metrics``) is over half."""
    keep = np.ones(len(metrics), dtype=bool)
    if layers is not None:
        keep &= metrics["layer"].between(*layers).to_numpy()
    keep &= (metrics["n_texts"] >= min_texts).to_numpy()
    for key, value in (("stack", stack), ("kind", kind)):
        if value is not None and key in metrics.columns:
            keep &= (metrics[key] == value).to_numpy()
    for flag in flags:
        if flag_share is not None and flag in flag_share:
            keep &= np.asarray(flag_share[flag]) > 0.5
    return metrics[keep].reset_index(drop=True)


def flag_shares(metrics: pd.DataFrame, flags: Sequence[str]) -> dict[str, np.ndarray]:
    """For each flag, the share of each head's texts it was flagged on, aligned with ``metrics``' rows: the
    summary's counts (``flags``: {flag: texts}, kept by :func:`head_metrics`) over ``n_texts``."""
    counts = metrics["flags"] if "flags" in metrics.columns else pd.Series([{}] * len(metrics))
    n_texts = metrics["n_texts"].to_numpy(float) if "n_texts" in metrics.columns else np.zeros(len(metrics))
    shares = {}
    for flag in flags:
        on = np.array([float((c if isinstance(c, Mapping) else {}).get(flag, 0)) for c in counts])
        shares[flag] = np.divide(on, n_texts, out=np.zeros(len(metrics)), where=n_texts > 0)
    return shares

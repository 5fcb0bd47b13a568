"""Figures of the KV cache page: memory against length, engines against the minimum, head groups, decode speed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attnviz import settings
from attnviz.i18n.translate import t, tr
from attnviz.labs.kv.config import KVConfig
from attnviz.labs.kv.memory import human_bytes, memory_curve, variants

GIB = 2**30
VARIANT_COLORS = {"as configured": "#000000", "mha": "#d62728", "gqa": "#1f77b4", "mqa": "#2ca02c", "mla": "#9467bd"}


def length_curves(
    cfg: KVConfig,
    lengths: Sequence[int],
    batch: int = 1,
    dtype: str = "bf16",
    group_size: int = settings.KV_GROUP_SIZE,
    block_size: int | None = None,
) -> dict[str, tuple[Sequence[int], list[int]]]:
    """Every variant's cache bytes at ``lengths`` (MHA, GQA, MQA, and MLA where the model has it), named as the
    KV cache page names them, then the model as configured (drawn last, on top): what
    :func:`make_kv_length_figure` draws."""
    curves: dict[str, tuple[Sequence[int], list[int]]] = {}
    for name, variant in variants(cfg).items():
        if name == "mla":
            label = t("kv_cache.curve_mla", name=name, rank=variant.kv_lora_rank, rope=variant.qk_rope_head_dim)
        else:
            label = t("kv_cache.curve_heads", name=name, n_kv_head=variant.n_kv_head)
        curves[label] = (lengths, memory_curve(variant, lengths, batch, dtype, group_size, block_size))
    curves["as configured"] = (lengths, memory_curve(cfg, lengths, batch, dtype, group_size, block_size))
    return curves


def make_kv_length_figure(
    curves: dict[str, tuple[Sequence[int], Sequence[int]]], *, gpu_bytes: int | None = None
) -> go.Figure:
    """Cache bytes against sequence length, log-log, one line per variant; a sliding window shows as a plateau."""
    fig = go.Figure()
    ticks = sorted({n for lengths, _ in curves.values() for n in lengths})
    for name, (lengths, sizes) in curves.items():
        shown = t("kv_figures.as_configured") if name == "as configured" else name
        fig.add_trace(
            go.Scatter(
                x=list(lengths),
                y=[s / GIB for s in sizes],
                name=shown,
                mode="lines",
                line={
                    "color": VARIANT_COLORS.get(name.split(" ")[0] if name != "as configured" else name),
                    "width": 4 if name == "as configured" else 2,
                    "dash": "solid" if name == "as configured" else "dash",
                },
                customdata=[human_bytes(s) for s in sizes],
                hovertemplate=t("kv_figures.length_hover", name=shown),
            )
        )
    if gpu_bytes:  # a trace, not add_hline: on a log axis an hline's annotation is placed at 10**y
        ends = [
            min(min(lengths) for lengths, _ in curves.values()),
            max(max(lengths) for lengths, _ in curves.values()),
        ]
        fig.add_trace(
            go.Scatter(
                x=ends,
                y=[gpu_bytes / GIB] * 2,
                name=t("kv_figures.gpu_left", size=human_bytes(gpu_bytes)),
                mode="lines",
                line={"dash": "dot", "color": "grey"},
                hoverinfo="skip",
            )
        )
    fig.update_layout(
        height=420,
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        xaxis={
            "type": "log",
            "title": {"text": t("kv_figures.seq_len_axis")},
            "tickvals": ticks,
            "ticktext": [_tokens_label(n) for n in ticks],
        },
        yaxis={"type": "log", "title": {"text": t("kv_figures.gib_axis")}, "dtick": 1, "exponentformat": "power"},
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def _tokens_label(n: int) -> str:
    """8192 -> '8K', 1048576 -> '1M', 300 -> '300'."""
    for size, unit in ((2**20, "M"), (2**10, "K")):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n:,}"


def make_engine_figure(minimum: int, engines: Sequence[tuple[str, int]]) -> go.Figure:
    """The theoretical minimum beside what each serving engine allocates for the same load (bars, GiB)."""
    names = [t("kv_figures.minimum"), *(name for name, _ in engines)]
    sizes = [minimum, *(size for _, size in engines)]
    fig = go.Figure(
        go.Bar(
            x=names,
            y=[s / GIB for s in sizes],
            marker={"color": ["#000000", *["#1f77b4"] * len(engines)]},
            text=[
                human_bytes(s) + ("" if i == 0 else f" ({s / minimum:.2f}×)" if minimum else "")
                for i, s in enumerate(sizes)
            ],
            textposition="outside",
            hovertemplate="%{x}: %{text}<extra></extra>",
        )
    )
    fig.update_layout(
        height=360,
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        yaxis={"title": {"text": t("kv_figures.gib_axis")}, "rangemode": "tozero"},
        showlegend=False,
    )
    return fig


def make_head_grouping_figure(n_head: int, n_kv_head: int, *, max_drawn: int = 64) -> go.Figure:
    """Query heads (top row) joined to the KV head they read (bottom row): MHA one to one, GQA groups, MQA one."""
    if n_kv_head < 1 or n_head % n_kv_head:
        raise ValueError(f"n_head ({n_head}) must be a multiple of n_kv_head ({n_kv_head})")
    group = n_head // n_kv_head
    shown_q = min(n_head, max_drawn)
    shown_kv = min(n_kv_head, (shown_q + group - 1) // group)
    qx = np.linspace(0, 1, shown_q) if shown_q > 1 else np.array([0.5])
    kvx = np.array([qx[min(shown_q - 1, g * group) : min(shown_q, (g + 1) * group)].mean() for g in range(shown_kv)])
    fig = go.Figure()
    xs, ys = [], []
    for h in range(shown_q):
        xs += [qx[h], kvx[min(h // group, shown_kv - 1)], None]
        ys += [1, 0, None]
    fig.add_trace(
        go.Scatter(x=xs, y=ys, mode="lines", line={"color": "#bbbbbb", "width": 1}, hoverinfo="skip", showlegend=False)
    )
    fig.add_trace(
        go.Scatter(
            x=qx,
            y=np.ones(shown_q),
            mode="markers",
            marker={"size": 12 if shown_q <= 32 else 7, "color": "#1f77b4", "symbol": "square"},
            name=t("kv_figures.query_heads"),
            text=[t("kv_figures.query_head_reads", h=h, g=h // group) for h in range(shown_q)],
            hovertemplate="%{text}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=kvx,
            y=np.zeros(shown_kv),
            mode="markers",
            marker={"size": 16, "color": "#d62728", "symbol": "square"},
            name=t("kv_figures.kv_heads"),
            text=[
                t("kv_figures.kv_head_serves", g=g, first=g * group, last=(g + 1) * group - 1) for g in range(shown_kv)
            ],
            hovertemplate="%{text}<extra></extra>",
        )
    )
    more = t("kv_figures.first_drawn", shown=shown_q, n_head=n_head) if shown_q < n_head else ""
    fig.update_layout(
        height=220,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        title={
            "text": t("kv_figures.grouping_title", n_head=n_head, n_kv_head=n_kv_head, group=group, more=more),
            "font": {"size": 14},
        },
        xaxis={"visible": False},
        yaxis={"visible": False, "range": [-0.4, 1.4]},
        legend={"orientation": "h", "y": -0.05},
    )
    return fig


def make_decode_figure(per_token: dict[str, Sequence[float]]) -> go.Figure:
    """Seconds per generated token against its position, one line per mode (with the cache, recomputing)."""
    fig = go.Figure()
    for name, seconds in per_token.items():
        fig.add_trace(
            go.Scatter(
                x=list(range(1, len(seconds) + 1)),
                y=[s * 1000 for s in seconds],
                name=name,
                mode="lines",
                hovertemplate=t("kv_figures.decode_hover", name=name),
            )
        )
    fig.update_layout(
        height=360,
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        xaxis={"title": {"text": t("kv_figures.generated_token")}},
        yaxis={"type": "log", "title": {"text": t("kv_figures.ms_per_token")}},
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def make_whatif_figure(table: pd.DataFrame) -> go.Figure:
    """MHA -> GQA/MQA on a real layer: mean JS divergence and output change against the KV memory kept."""
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=table["kv_share"],
            y=table["js_mean"],
            name=t("kv_figures.js_mean"),
            mode="lines+markers",
            text=[tr(label) for label in table["label"]],
            hovertemplate=t("kv_figures.js_hover"),
        )
    )
    fig.add_trace(
        go.Scatter(
            x=table["kv_share"],
            y=table["output_change"],
            name=t("kv_figures.output_change"),
            mode="lines+markers",
            text=[tr(label) for label in table["label"]],
            hovertemplate=t("kv_figures.output_hover"),
        )
    )
    fig.update_layout(
        height=360,
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        xaxis={
            "type": "log",
            "title": {"text": t("kv_figures.kept_axis")},
            "tickformat": ".0%",
            "autorange": "reversed",
        },
        yaxis={"title": {"text": t("kv_figures.divergence_axis")}, "rangemode": "tozero"},
        legend={"orientation": "h", "y": -0.25},
    )
    return fig

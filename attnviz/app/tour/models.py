"""The tour's steps on model design: why several heads, MQA/GQA and the KV cache, FlashAttention's tiling.
See :mod:`attnviz.app.tour.context`.

``heads`` merges a real layer's heads into fewer, wider ones (:mod:`attnviz.labs.tour.models`) from the record's
q and k, under ``("tour_heads", (*settings.key(), layer))``. ``kv`` draws the KV cache page's curves and head
grouping for the tour model's own config (the page's "sidebar model" config) and reads the page's MHA -> GQA
what-if under its key (``("kv_whatif", (*settings.key(), layer))``) and, when the reader asks, its measured cache
(``("kv_measured", settings.key())``). ``tiling`` is the Cost page's tiling example at its defaults (24 keys, seed
0) and its naive path's memory against what this device has free.
"""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from attnviz import settings as limits
from attnviz.app.loading import cached, record_job, result_cache
from attnviz.app.progress import duration_text
from attnviz.app.state import valid_choice
from attnviz.app.tour.context import StepView, TourContext, price_first, say_number, warm_result
from attnviz.app.widgets import plotly
from attnviz.core.token_display import markdown_text, plain_text
from attnviz.errors import ModelUnavailableError
from attnviz.figures.base import make_head_heatmap_figure
from attnviz.figures.cost import make_tiling_figure
from attnviz.figures.kv import length_curves, make_head_grouping_figure, make_kv_length_figure
from attnviz.figures.tour import highlight_box, highlight_traces
from attnviz.i18n.translate import t
from attnviz.labs.cost import paths as cost
from attnviz.labs.kv.config import KVConfig, kv_config_of
from attnviz.labs.kv.gqa import gqa_whatif
from attnviz.labs.kv.memory import curve_lengths, estimate, human_bytes, variants
from attnviz.labs.kv.report import KV_MEASURE_LENGTHS, measured_vs_estimated, whatif_summary
from attnviz.labs.tour import models
from attnviz.models.record import short_text

# measured_vs_estimated on SmolLM2-135M, 8 prefills up to 200 tokens, 2-core CPU: 4.0 s measured
KV_MEASURE_SECONDS = 4.0
# an early layer's rows spread their weight (0.1-0.4 a key on the examples' L0): the colour scale's gamma brightens
# them, as the Heads page's gamma setting does, so the framed keys are seen against the rest
HEADS_GAMMA = 0.5
KV_SEQ_LEN = 8192  # the KV cache page's default length (min(8192, the model's max_positions))
KV_DTYPE = "bf16"  # ... and its default cache dtype
TILING_KEYS, TILING_SEED, TILING_BLOCK = 24, 0, 8  # the Cost page's tiling defaults
NAIVE_TOKENS = 8192  # where the step states the naive path's memory: the Cost page's longest measured size


def _token(record, i: int) -> str:
    return markdown_text(short_text(record.tokens[i].text))


# ---------------------------------------------------------------------------------------------------------------
# heads: what one wide head loses


def _heads_key(ctx: TourContext, layer: int) -> tuple:
    return (*ctx.settings.key(), layer)


def _merges(ctx: TourContext, layer: int) -> dict[int, models.HeadMerge]:
    record = ctx.record()
    return cached(
        "tour_heads", _heads_key(ctx, layer), lambda: models.head_merges(record, layer), t("tour_models.merging")
    )


def heads_warm(ctx: TourContext) -> None:
    record = warm_result("record", ctx.settings.key(), lambda: record_job(ctx.source, ctx.settings)(None))
    if record.keeps_qk:
        layer = warm_result("tour_heads_layer", ctx.settings.key(), lambda: models.most_varied_layer(record))
        warm_result("tour_heads", _heads_key(ctx, layer), lambda: models.head_merges(record, layer))


def _head_names(n_head: int, n_merged: int) -> list[str]:
    """One row per head of the layer, named by the merged head it went into: "H3" unmerged, "H3 (H3–H5)" merged
    in a group of three (the rows of one group show the same weights: that is what merging does to them)."""
    group = n_head // n_merged
    return [
        f"H{h}" if group == 1 else f"H{h} (H{h // group * group}–H{(h // group + 1) * group - 1})"
        for h in range(n_head)
    ]


def heads_draw(ctx: TourContext) -> None:
    price_first(ctx, ("record", ctx.settings.key()))
    record = ctx.record()
    if not record.keeps_qk:
        st.info(t("tour_models.no_qk"))
        return
    if record.q_len < 2:
        st.info(t("tour_models.one_token"))
        return
    layer_key = ctx.widget_key("layer")
    default = cached(
        "tour_heads_layer", ctx.settings.key(), lambda: models.most_varied_layer(record), t("tour_models.merging")
    )
    valid_choice(layer_key, list(range(record.n_layer)), default)
    layer = st.session_state[layer_key]
    merges = _merges(ctx, layer)
    row = models.most_varied_row(merges[record.n_head])
    choices = list(merges)
    merged_key = ctx.widget_key("n_merged")
    valid_choice(merged_key, choices, record.n_head)
    n_merged = st.session_state[merged_key]
    merge = merges[n_merged]
    labels = record.labels()
    visible = record.mask(layer)[row]  # (S,)
    group = record.n_head // n_merged
    fig = make_head_heatmap_figure(
        merge.weights[:, row].repeat_interleave(group, dim=0),  # (n_head, S): each head's row, its merged head's
        _head_names(record.n_head, n_merged),
        labels,
        mask=visible[None].expand(record.n_head, -1),
        k_hover=record.labels(full=True),
        title=t("tour_models.heads_title", layer=layer, token=plain_text(short_text(record.tokens[row].text))),
        gamma=HEADS_GAMMA,
    )
    fig.update_yaxes(title_text=t("views.head"))  # its rows are the heads of one query, not queries
    for m in range(n_merged):  # one frame per (merged) head, round its group's rows, at its strongest key
        top = int(merge.top[m, row])
        highlight_box(fig, top - 0.5, top + 0.5, m * group - 0.5, (m + 1) * group - 0.5)
    plotly(fig, key=ctx.widget_key("figure"))
    st.caption(t("tour_models.heads_frames"))
    cols = st.columns(2)
    cols[0].radio(
        t("tour_models.n_merged"),
        choices,
        key=merged_key,
        horizontal=True,
        format_func=lambda g: t("tour_models.n_merged_option", n=g, dims=merge.head_dim * record.n_head // g),
    )
    cols[1].selectbox(t("views.layer"), list(range(record.n_layer)), key=layer_key, format_func=lambda i: f"L{i}")
    own, one = merges[record.n_head], merges[min(merges)]
    say_number(
        t(
            "tour_step.heads.number_own" if n_merged == record.n_head else "tour_step.heads.number",
            layer=layer,
            token=_token(record, row),
            n_head=record.n_head,
            distinct=own.distinct(row, merged=False),
            mean=own.mean_distinct(merged=False),
            merged=t(
                "tour_models.merged_one" if n_merged == 1 else "tour_models.merged_many", n=n_merged, dims=merge.width
            ),
            merged_distinct=merge.distinct(row),
            merged_mean=merge.mean_distinct(),
            kept=merge.kept,
            one_dims=one.width,
            one_kept=one.kept,
        )
    )


# ---------------------------------------------------------------------------------------------------------------
# kv: the cache for each number of KV heads

WHATIF_LAYER = 0  # the KV cache page's what-if opens on L0


def _whatif_key(ctx: TourContext) -> tuple:
    return (*ctx.settings.key(), WHATIF_LAYER)


def _whatif_job(ctx: TourContext):
    return lambda: gqa_whatif(ctx.source.attention_layer(ctx.settings.text, ctx.settings.max_tokens, WHATIF_LAYER))


def kv_warm(ctx: TourContext) -> None:
    if ctx.settings.text.strip():
        warm_result("kv_whatif", _whatif_key(ctx), _whatif_job(ctx))


def kv_curves(cfg: KVConfig, seq_len: int = KV_SEQ_LEN) -> dict[str, tuple[list[int], list[int]]]:
    """The KV cache page's memory curves for ``cfg`` at its defaults (batch 1, bf16), labelled as it labels them."""
    lengths = curve_lengths(max(seq_len, cfg.max_positions or limits.KV_DEFAULT_SEQ_LEN, 4 * (cfg.window or 0)))
    return length_curves(cfg, lengths, 1, KV_DTYPE)


def kv_bytes(cfg: KVConfig, n_kv_head: int, seq_len: int = KV_SEQ_LEN) -> int:
    """The cache's bytes at ``seq_len`` tokens (batch 1, bf16) with ``n_kv_head`` KV heads: the page's estimate."""
    return estimate(replace(cfg, n_kv_head=n_kv_head), 1, seq_len, KV_DTYPE).total_bytes


def kv_draw(ctx: TourContext) -> None:
    cfg = kv_config_of(ctx.source)
    seq_len = min(KV_SEQ_LEN, cfg.max_positions or KV_SEQ_LEN)
    choices = models.kv_choices(cfg.n_head)
    n_kv_key = ctx.widget_key("n_kv_head")
    valid_choice(n_kv_key, choices, cfg.n_kv_head)
    n_kv = st.session_state[n_kv_key]
    curves = kv_curves(cfg, seq_len)
    fig = make_kv_length_figure(curves)
    names = {
        t("kv_cache.curve_heads", name=name, n_kv_head=v.n_kv_head)
        for name, v in variants(cfg).items()
        if name != "mla" and v.n_kv_head == n_kv
    }
    if n_kv == cfg.n_kv_head:
        names.add(t("kv_figures.as_configured"))
    plotly(highlight_traces(fig, names), key=ctx.widget_key("curves"))
    grouping = make_head_grouping_figure(cfg.n_head, n_kv)
    group = cfg.n_head // n_kv
    xs = grouping.data[1].x  # the query heads' positions; the first KV head serves the first `group` of them
    highlight_box(grouping, xs[0] - 0.04, xs[group - 1] + 0.04, -0.25, 1.25)
    plotly(grouping, key=ctx.widget_key("grouping"))
    st.radio(
        t("tour_models.n_kv_head"),
        choices,
        key=n_kv_key,
        horizontal=True,
        format_func=lambda n: t(f"tour_models.kv_kind_{'mha' if n == cfg.n_head else 'mqa' if n == 1 else 'gqa'}", n=n),
    )
    size, mha = kv_bytes(cfg, n_kv, seq_len), kv_bytes(cfg, cfg.n_head, seq_len)
    sizes = t("tour_models.and").join(
        t("tour_models.kv_size", n=n, size=human_bytes(kv_bytes(cfg, n, seq_len))) for n in choices
    )
    say_number(
        t(
            "tour_step.kv.number_mha" if n_kv == cfg.n_head else "tour_step.kv.number",
            n_kv=n_kv,
            seq_len=seq_len,
            size=human_bytes(size),
            bytes=size,
            ratio=mha / size,
            n_head=cfg.n_head,
            sizes=sizes,
            own=cfg.n_kv_head,
        )
    )
    _kv_whatif(ctx, cfg, n_kv)
    _kv_measured(ctx)


def _kv_whatif(ctx: TourContext, cfg: KVConfig, n_kv: int) -> None:
    """How much the attention of layer 0 changes with its KV heads pooled down to ``n_kv`` (the page's what-if)."""
    if n_kv > cfg.n_kv_head:  # more KV heads than trained: copies of its own, the same attention
        say_number(t("tour_step.kv.more_heads", n_kv=n_kv, own=cfg.n_kv_head, group=n_kv // cfg.n_kv_head))
        return
    if not ctx.settings.text.strip():
        return
    price_first(ctx, ("kv_whatif", _whatif_key(ctx)))
    try:
        summary = whatif_summary(cached("kv_whatif", _whatif_key(ctx), _whatif_job(ctx), t("kv_ui.whatif_spinner")))
    except (ValueError, ModelUnavailableError) as err:
        st.info(t("kv_ui.not_for_model", error=err))
        return
    pooled = min(summary["n_kv_head"]) if n_kv == cfg.n_kv_head else n_kv  # as trained: what MQA would change
    row = summary[summary["n_kv_head"] == pooled]
    if row.empty or pooled == cfg.n_kv_head:  # a layer of one KV head: nothing to pool
        return
    say_number(
        t(
            "tour_step.kv.whatif_own" if n_kv == cfg.n_kv_head else "tour_step.kv.whatif",
            layer=WHATIF_LAYER,
            n_kv=pooled,
            own=cfg.n_kv_head,
            js=float(row["js_mean"].iloc[0]),
            worst=float(row["js_worst_head"].iloc[0]),
            change=float(row["output_change"].iloc[0]),
        )
    )


def _kv_measured(ctx: TourContext) -> None:
    """The real cache against the estimate, as the page measures it: on the reader's request (it takes seconds)."""
    key = ("kv_measured", ctx.settings.key())
    held = result_cache().lookup(key)[0]
    if not ctx.settings.text.strip():
        return
    if not held and not st.toggle(
        t("tour_models.measure", time=duration_text(KV_MEASURE_SECONDS)), key=ctx.widget_key("measure")
    ):
        return
    try:
        checks = cached(
            "kv_measured",
            ctx.settings.key(),
            lambda: measured_vs_estimated(ctx.source, ctx.settings.text, KV_MEASURE_LENGTHS),
            t("kv_ui.measure_spinner"),
        )
    except (ValueError, ModelUnavailableError) as err:
        st.info(t("kv_ui.no_cache", error=err))
        return
    worst = int(checks["error (bytes)"].abs().max())
    say_number(t("tour_step.kv.measured", worst=worst, n=len(checks), longest=int(checks["tokens"].max())))


# ---------------------------------------------------------------------------------------------------------------
# tiling: the softmax of a row, a block of keys at a time


def tiling_warm(ctx: TourContext) -> None:
    cost.tiling_example(TILING_KEYS, TILING_BLOCK, TILING_SEED)  # milliseconds: nothing to keep


def tiling_draw(ctx: TourContext) -> None:
    block_key = ctx.widget_key("block")
    valid_choice(block_key, range(1, 17), TILING_BLOCK)
    block = st.session_state[block_key]
    example = cost.tiling_example(TILING_KEYS, block, TILING_SEED)
    fig = make_tiling_figure(example.steps, example.weights)
    framed = models.max_score_block(example.steps)
    start, end = example.steps[framed].block
    low = min(0.0, min(float(s.scores.min()) for s in example.steps))
    high = max(float(s.scores.max()) for s in example.steps)
    highlight_box(fig, start - 0.5, end - 0.5, low, high)
    plotly(fig, key=ctx.widget_key("figure"))
    st.slider(t("cost.block"), 1, 16, key=block_key)
    device = ctx.spec.device if ctx.spec else "cpu"
    free = cost.available_bytes(device)
    last = example.steps[-1]
    say_number(
        t(
            "tour_step.tiling.number",
            block=block,
            n_blocks=len(example.steps),
            n_keys=TILING_KEYS,
            difference=example.max_difference,
            framed=framed,
            m=example.steps[framed].m,
            l=last.l,
            tokens=NAIVE_TOKENS,
            mb=cost.naive_bytes(NAIVE_TOKENS) / 2**20,
            n_head=cost.N_HEAD,
            free=human_bytes(free),
            device=device,
            limit=cost.naive_limit(free),
        )
    )


VIEWS: dict[str, StepView] = {
    "heads": StepView(draw=heads_draw, warm=heads_warm),
    "kv": StepView(draw=kv_draw, warm=kv_warm),
    "tiling": StepView(draw=tiling_draw, warm=tiling_warm),
}

"""Side by side: two texts on one model, one text on two models with one tokenizer, or one text under two masks."""

import streamlit as st

from attnviz.app.loading import cached, current_record, require_source
from attnviz.app.navigation import frame_settings
from attnviz.app.state import valid_choice
from attnviz.app.weights_note import random_weights_note
from attnviz.app.widgets import plotly, show_info, table
from attnviz.core.token_display import markdown_text
from attnviz.figures.compare import (
    jsd_scale,
    make_compare_head_figure,
    make_compare_jsd_figure,
    make_compare_stat_figure,
)
from attnviz.figures.heads import stat_name
from attnviz.i18n.translate import t, tr
from attnviz.labs import compare
from pages.widgets.compare import choose_b, choose_head, run_comparison

HEADERS = {
    "layer": "stat_names.layer",
    "head": "stat_names.head",
    "a": "compare.col_a",
    "b": "compare.col_b",
    "diff": "compare.col_diff",
    "jsd": "compare.col_jsd",
}
SQRT_TOKENS = 64  # past this many tokens most weights are small: √ colour is on by itself

st.title(t("compare.title"))
st.caption(t("compare.intro"))
settings = frame_settings()
record_a = current_record(settings)
if record_a is None:
    st.stop()
source_a = require_source(settings)
settings_b = choose_b(settings, record_a, source_a)
record_b = current_record(settings_b)
if record_b is None:
    st.stop()
key = (*settings.key(), settings_b.spec, settings_b.text)
comparison = run_comparison(key, record_a, record_b)
random_weights_note(source_a)

names = {"model_a": markdown_text(record_a.model_name), "model_b": markdown_text(record_b.model_name)}
masks = {"mask_a": tr(record_a.mask_summary()), "mask_b": tr(record_b.mask_summary())}
st.caption(t("compare.sides", **names, **masks, n_a=len(record_a.tokens), n_b=len(record_b.tokens)))
aligned = comparison.alignment
if comparison.note is not None:
    show_info(comparison.note)
else:
    st.caption(t("compare.aligned", n=len(aligned), n_a=aligned.n_a, n_b=aligned.n_b, queries=comparison.queries))
    if aligned.cut:
        st.caption(t("compare.aligned_cut", limit=compare.ALIGN_TOKENS, cut=aligned.cut))
    if not len(aligned):
        st.info(t("compare.no_aligned"))

st.subheader(t("compare.stats_header"))
valid_choice("compare_stat", comparison.statistics, "entropy")
statistic = st.selectbox(t("compare.statistic"), comparison.statistics, key="compare_stat", format_func=stat_name)
plotly(make_compare_stat_figure(comparison, statistic), key="compare_stats")
st.caption(t("compare.stats_caption"))
if comparison.jsd is None:
    st.stop()
largest = comparison.largest(statistic, digits=3)
if len(aligned):
    st.subheader(t("compare.jsd_header"))
    low, high = jsd_scale(comparison)
    st.caption(t("compare.jsd_scale", low=f"{low:g}", high=f"{high:g}"))
    layer, head = choose_head(comparison, largest, key)
    plotly(
        make_compare_jsd_figure(comparison, selected=(layer, head)),
        key="compare_jsd",
        on_select="rerun",
        selection_mode=("points",),
    )
    st.caption(t("compare.jsd_caption"))

    st.subheader(t("compare.head_header", layer=layer, head=head))
    long_input = max(record_a.q_len, record_b.q_len) > SQRT_TOKENS
    emphasise = st.toggle(t("compare.sqrt"), value=long_input, key=f"compare_sqrt_{long_input}")
    pair = cached(
        "compare_head",
        (*key, layer, head),
        lambda: compare.head_pair(comparison, layer, head),
        t("compare.reading_head"),
        need=compare.head_pair_need(comparison),
    )
    plotly(make_compare_head_figure(comparison, pair, gamma=0.5 if emphasise else 1.0), key="compare_head_maps")
    pooled = any(end - start > 1 for spans in (pair.a_spans, pair.b_spans, pair.diff_spans) for start, end in spans)
    sampled = " " + t("compare.head_sampled", stride=pair.stride) if pair.stride > 1 else ""
    st.caption(t("compare.head_caption") + (" " + t("compare.head_pooled") if pooled else "") + sampled)

st.subheader(t("compare.largest_header"))
table(
    largest,
    key="compare_largest",
    headers=HEADERS,
    hide_index=True,
    width="stretch",
    on_select="rerun",
    selection_mode="single-row",
)
st.caption(t("compare.largest_caption", n=len(largest), statistic=stat_name(statistic)))

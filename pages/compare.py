"""Side by side: two texts on one model, one text on two models with one tokenizer, or one text under two masks."""

import streamlit as st

from attnviz.app.loading import cached, current_record, require_source, result_cache
from attnviz.app.navigation import frame_settings
from attnviz.app.state import valid_choice
from attnviz.app.widgets import plotly, show_info, table
from attnviz.core.token_display import markdown_text
from attnviz.figures.compare import make_compare_jsd_figure, make_compare_stat_figure
from attnviz.figures.heads import stat_name
from attnviz.i18n.translate import t, tr
from attnviz.labs import compare
from pages.widgets.compare import choose_b

HEADERS = {
    "layer": "stat_names.layer",
    "head": "stat_names.head",
    "a": "compare.col_a",
    "b": "compare.col_b",
    "diff": "compare.col_diff",
    "jsd": "compare.col_jsd",
}

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
seconds = compare.comparison_seconds(record_a, record_b)
if ("compare", key) not in result_cache() and seconds > compare.CONFIRM_SECONDS:
    queries = compare.jsd_queries(record_a.n_layer, record_a.n_head, max(record_a.k_len, record_b.k_len))
    st.warning(t("compare.slow", queries=queries, seconds=seconds))
    if not st.button(t("compare.run", seconds=seconds), key="compare_run"):
        st.stop()
comparison = cached(
    "compare",
    key,
    lambda: compare.compare_records(record_a, record_b),
    t("compare.comparing"),
    need=compare.comparison_need(record_a, record_b),
)

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
if comparison.jsd is not None:
    st.subheader(t("compare.jsd_header"))
    plotly(make_compare_jsd_figure(comparison), key="compare_jsd")
    st.caption(t("compare.jsd_caption"))
    st.subheader(t("compare.largest_header"))
    largest = comparison.largest(statistic)
    table(largest, key="compare_largest", headers=HEADERS, hide_index=True, width="stretch")
    st.caption(t("compare.largest_caption", n=len(largest), statistic=stat_name(statistic)))

"""Heads: the layer x head grid, one head drawn large, the mean over heads, per-head statistics."""

import streamlit as st

from attnviz import ui
from attnviz.figures import make_head_grid_figure, make_head_heatmap_figure, make_head_stats_figure
from attnviz.head_stats import STAT_COLUMNS, head_statistics

st.title("Heads")
record = ui.current_record(ui.frame_settings())
if record is None:
    st.stop()

st.caption(
    f"**{record.model_name}**: {len(record.tokens)} tokens, {record.n_layer} layers × {record.n_head} heads "
    f"({record.n_kv_head} key/value heads). Weights from `{record.implementation}`."
)
if record.model_name.startswith("embedded"):
    st.info("The embedded model's weights are random: its patterns show the mechanics of attention, not language.")

gamma = 0.5 if st.toggle("Emphasise small weights (colour by √weight)", key="heads_sqrt") else 1.0

st.subheader("Layer × head grid")
st.caption(
    "Each tile is one head (rows: query, columns: key), max-pooled for long texts; the last column is the mean over heads."
)
ui.plotly(make_head_grid_figure(record.attention, gamma=gamma), key="heads_grid")

st.subheader("One head, large")
layer, head = ui.layer_head_picker(record.n_layer, record.n_head, key="heads")
weights = record.head_weights(layer, head)
title = f"L{layer} {'mean over heads' if head == 'mean' else f'H{head}'}"
labels = record.labels()
ui.plotly(
    make_head_heatmap_figure(weights, labels, labels, title=title, gamma=gamma, mask=record.mask), key="heads_large"
)

st.subheader("Per-head statistics")
stats = head_statistics(record.attention, record.mask)
metric = st.selectbox("Statistic", STAT_COLUMNS, key="heads_metric")
ui.plotly(make_head_stats_figure(stats, metric), key="heads_stats_chart")
st.dataframe(stats, key="heads_stats_table", hide_index=True, width="stretch")
st.caption(
    "entropy in nats; entropy_norm = entropy / log(visible keys) (1 = uniform); flags: uniform (entropy_norm ≥ 0.9), "
    "saturated (max weight ≥ 0.9), sink (≥ 0.5 on the first token), previous-token (≥ 0.5 on the previous token)."
)

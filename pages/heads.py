"""Heads: the layer x head grid, one head drawn large (pooled with a full-resolution zoom on long texts), statistics."""

import streamlit as st

from attnviz import ui
from attnviz.token_display import markdown_text

st.title("Heads")
settings = ui.frame_settings()
record = ui.current_record(settings)
if record is None:
    st.stop()

st.caption(
    f"**{markdown_text(record.model_name)}**: {len(record.tokens):,} tokens, {record.n_layer} layers × {record.n_head} heads "
    f"({record.n_kv_head} key/value heads), mask: {record.mask_summary()}. Weights from `{record.implementation}`."
)
if record.random_weights:
    st.info("The embedded model's weights are random: its patterns show the mechanics of attention, not language.")

gamma = 0.5 if st.toggle("Emphasise small weights (colour by √weight)", key="heads_sqrt") else 1.0
key = settings.key()

st.subheader("Layer × head grid")
b = record.bin_size
st.caption(
    "Each tile is one head (rows: query, columns: key), max-pooled so that thin patterns such as a previous-token "
    "diagonal stay visible; the last column is the mean over heads."
    + (f" Drawn from maps pooled over {b} × {b} tokens." if b > 1 else "")
)
ui.plotly(ui.grid_figure(key, gamma, record), key="heads_grid")

st.subheader("One head, large")
layer, head = ui.layer_head_picker(record.n_layer, record.n_head, key="heads")
ui.head_view(record, layer, head, key="heads", gamma=gamma)

st.subheader("Per-head statistics")
ui.stats_section(record, key, key="heads")

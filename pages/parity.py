"""Parity: attnviz's attention, fed a pretrained model's weights, reproduces that model's attention."""

import streamlit as st

from attnviz import ui
from attnviz.figures import make_head_heatmap_figure, make_parity_figure
from attnviz.parity import ParityUnsupportedError

st.title("Parity: our attention runs the model's layers")
st.markdown(
    "Every layer's Q/K/V/O weights are copied into `attnviz.attention.MultiHeadAttention` and fed the hidden "
    "states that really entered that layer. Its weights are drawn beside the model's own eager attention, and the "
    "largest difference is measured for every head of every layer."
)
settings = ui.frame_settings()
record = ui.current_record(settings)
if record is None:
    st.stop()
if settings.choice.embedded:
    st.info(
        "The embedded model *is* attnviz's attention, so there is no other implementation to reproduce here. "
        "Pick MiniLM or SmolLM2 in the sidebar to check our layers against a pretrained model."
    )
    st.stop()
try:
    parity = ui.compute_parity(settings.choice, settings.text, settings.max_tokens)
except ParityUnsupportedError as err:
    st.warning(f"Parity is not available for this model: {err}")
    st.stop()

cols = st.columns(3)
cols[0].metric("max |ours − model|", f"{parity.worst:.2e}")
cols[1].metric("tolerance", "1e-05")
cols[2].metric("heads checked", f"{parity.max_abs_diff.numel()}")
if parity.worst <= 1e-5:
    st.success(f"Every head of every layer matches to {parity.worst:.1e} (float32).")
else:
    st.error(f"Our layers differ from the model by up to {parity.worst:.2e}.")
ui.plotly(make_parity_figure(parity.max_abs_diff), key="parity_diffs")

layer, head = ui.layer_head_picker(record.n_layer, record.n_head, key="parity", with_mean=False)
labels = record.labels()
left, right = st.columns(2)
with left:
    fig = make_head_heatmap_figure(parity.ours[layer, head], labels, labels, title="attnviz", mask=record.mask)
    ui.plotly(fig, key="parity_ours")
with right:
    fig = make_head_heatmap_figure(parity.theirs[layer, head], labels, labels, title="model (eager)", mask=record.mask)
    ui.plotly(fig, key="parity_theirs")

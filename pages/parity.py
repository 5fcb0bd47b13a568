"""Parity: attnviz's attention, fed a pretrained model's weights, reproduces that model's attention."""

import streamlit as st

from attnviz import settings as limits
from attnviz import ui
from attnviz.figures import make_head_heatmap_figure, make_parity_figure
from attnviz.parity import PARITY_TOLERANCE
from attnviz.record import token_labels
from attnviz.source import ModelUnavailableError

st.title("Parity: our attention runs the model's layers")
st.markdown(
    "Every layer's Q/K/V/O weights are copied into `attnviz.attention.MultiHeadAttention` and fed the hidden "
    "states that really entered that layer, with the mask that layer really applied. Its weights are drawn beside "
    "the model's own eager attention, and the largest difference is measured for every head of every layer."
)
settings = ui.frame_settings()
source = ui.require_source(settings)
if not source.supports_parity:
    why = "it *is* attnviz's attention" if source.random_weights else "our layers do not cover its architecture"
    st.info(
        f"There is no other implementation to check this model against here ({why}). Parity covers BERT-style "
        "encoders and Llama-style decoders: pick MiniLM or SmolLM2 in the sidebar."
    )
    st.stop()
ui.require_text(settings)
n_tokens = min(settings.max_tokens, limits.PARITY_TOKENS)
bugs = {None: "none: our layers as they are", **source.parity_bugs()}
bug = st.radio(
    "Break it: put a known bug into our layers and watch the check fail",
    list(bugs),
    format_func=bugs.get,
    key="parity_bug",
)
try:
    parity = ui.cached(
        "parity",
        (*settings.key(n_tokens), bug),
        lambda: source.check_parity(settings.text, n_tokens, bug),
        "Running our attention on the model's layers…",
    )
except ModelUnavailableError as err:
    st.error(str(err))
    st.stop()
T = parity.ours.shape[-1]
if settings.max_tokens > limits.PARITY_TOKENS:
    st.caption(
        f"Parity compares every weight of every layer, so it reads at most the first {limits.PARITY_TOKENS} tokens."
    )

cols = st.columns(4)
cols[0].metric("max |ours − model|", f"{parity.worst:.2e}")
cols[1].metric("tolerance", f"{PARITY_TOLERANCE:.0e}")
cols[2].metric("heads checked", f"{parity.max_abs_diff.numel()}")
cols[3].metric("tokens", T)
if parity.matches:
    st.success(
        f"Every head of every layer matches to {parity.worst:.1e} (float32). Masks: {', '.join(sorted(set(parity.masks)))}."
    )
elif bug is not None:
    st.error(f"With the bug ({bugs[bug]}), our layers differ from the model by up to {parity.worst:.2e}: caught.")
else:
    st.error(f"Our layers differ from the model by up to {parity.worst:.2e}.")
ui.plotly(make_parity_figure(parity.max_abs_diff), key="parity_diffs")

layer, head = ui.layer_head_picker(parity.ours.shape[0], parity.ours.shape[1], key="parity", with_mean=False)
labels = token_labels(parity.tokens)
mask = parity.keys[layer].dense()
left, right = st.columns(2)
with left:
    fig = make_head_heatmap_figure(parity.ours[layer, head], labels, labels, title="attnviz", mask=mask)
    ui.plotly(fig, key="parity_ours")
with right:
    fig = make_head_heatmap_figure(parity.theirs[layer, head], labels, labels, title="model (eager)", mask=mask)
    ui.plotly(fig, key="parity_theirs")
st.caption(f"Full resolution: all {T} × {T} weights of each.")

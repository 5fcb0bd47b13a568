"""Padding: several sentences as one batch, the padding mask, and each sentence's attention with pads marked."""

import streamlit as st

from attnviz import settings as limits
from attnviz import ui
from attnviz.figures import make_padding_mask_figure
from attnviz.source import ModelUnavailableError
from attnviz.token_display import plain_text

DEFAULT = "The cat sat on the mat.\nDogs bark.\n注意力机制很有用。"

st.title("Padding")
st.markdown(
    "Sentences of different lengths are padded to one length to run as a batch. The padding mask must stop every "
    "real token from attending to a pad. **Right** padding puts the pads after the text (encoders), **left** "
    "padding before it (decoders generating in a batch)."
)
settings = ui.frame_settings()
source = ui.require_source(settings)
if "pad_texts" not in st.session_state:
    st.session_state.pad_texts = DEFAULT
st.text_area("Sentences, one per line", key="pad_texts", height=100)
side = st.radio("Pad on the", ["right", "left"], key="pad_side", horizontal=True)
texts = tuple(line for line in st.session_state.pad_texts.splitlines() if line.strip())
if len(texts) < 2:
    st.info("Give at least two sentences, one per line.")
    st.stop()
if len(texts) > limits.PADDING_SENTENCES:
    st.warning(f"Only the first {limits.PADDING_SENTENCES} sentences are batched.")
    texts = texts[: limits.PADDING_SENTENCES]
n_tokens = min(settings.max_tokens, limits.PADDING_TOKENS)
try:
    batch = ui.cached(
        "batch",
        (settings.spec, texts, n_tokens, side),
        lambda: source.run_batch(list(texts), n_tokens, side),
        "Running the batch…",
    )
except ModelUnavailableError as err:
    st.error(str(err))
    st.stop()
if settings.max_tokens > limits.PADDING_TOKENS:
    st.caption(f"Each sentence is cut to {limits.PADDING_TOKENS} tokens here.")
token_rows = [[t.text for t in r.tokens] for r in batch.records]
st.subheader("Padding mask")
st.caption("Blue: real token (may be attended to). Grey: pad.")
ui.plotly(make_padding_mask_figure(batch.key_mask, token_rows), key="pad_mask")
st.metric("largest weight a real token puts on a pad", f"{batch.pad_key_weight:.1e}")

st.subheader("Each sentence's attention")
first = batch.records[0]
layer, head = ui.layer_head_picker(first.n_layer, first.n_head, key="pad")
for i, record in enumerate(batch.records):
    labels = [f"{j} {'▢ ' if t.pad else ''}{t.text}" for j, t in enumerate(record.tokens)]
    title = f"sentence {i}: {plain_text(texts[i][:40])}"
    ui.head_view(record, layer, head, key=f"pad_sentence_{i}", labels=labels, title=title)

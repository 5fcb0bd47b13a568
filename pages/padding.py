"""Padding: several sentences as one batch, the padding mask, and each sentence's attention with pads marked."""

import streamlit as st

from attnviz import settings as limits
from attnviz.app.head_view import head_view
from attnviz.app.loading import cached, readable_lines, require_source, unknown_warning
from attnviz.app.navigation import frame_settings
from attnviz.app.widgets import layer_head_picker, plotly, show_error
from attnviz.core.token_display import plain_text
from attnviz.errors import ModelUnavailableError
from attnviz.figures.padding import make_padding_mask_figure
from attnviz.i18n.translate import t
from attnviz.models.source import Capability

SIDES = ("right", "left")  # the radio's values; its labels are the session's language

st.title(t("padding.title"))
st.markdown(t("padding.intro"))
settings = frame_settings()
source = require_source(settings)
if "pad_texts" not in st.session_state:  # three lengths, in the session's language, less any line the model cannot read
    st.session_state.pad_texts = readable_lines(source, t("padding.default_sentences"), limits.PADDING_TOKENS)
st.text_area(t("padding.sentences"), key="pad_texts", height=100)
side_names = {"right": t("padding.right"), "left": t("padding.left")}
side = st.radio(t("padding.pad_on_the"), SIDES, key="pad_side", horizontal=True, format_func=side_names.get)
texts = tuple(line for line in st.session_state.pad_texts.splitlines() if line.strip())
if len(texts) < 2:
    st.info(t("padding.two_sentences"))
    st.stop()
if len(texts) > limits.PADDING_SENTENCES:
    st.warning(t("padding.first_sentences", n=limits.PADDING_SENTENCES))
    texts = texts[: limits.PADDING_SENTENCES]
n_tokens = min(settings.max_tokens, limits.PADDING_TOKENS)
try:
    batch = cached(
        "batch",
        (settings.spec, texts, n_tokens, side),
        lambda: source.run_batch(list(texts), n_tokens, side),
        t("padding.running"),
    )
except ModelUnavailableError as err:
    show_error(err)
    st.stop()
if settings.max_tokens > limits.PADDING_TOKENS:
    st.caption(t("padding.cut", n=limits.PADDING_TOKENS))
unknown_warning([token for r in batch.records for token in r.tokens], batch.records[0].model_name)
token_rows = [[token.text for token in r.tokens] for r in batch.records]
st.subheader(t("padding.mask_header"))
st.caption(t("padding.mask_caption"))
plotly(make_padding_mask_figure(batch.key_mask, token_rows), key="pad_mask")
st.metric(t("padding.pad_weight"), f"{batch.pad_key_weight:.1e}")
if Capability.TARGET in source.capabilities:  # an encoder-decoder pads its sources and its targets
    try:
        both = cached(
            "pad_pair",
            (settings.spec, texts, n_tokens, side),
            lambda: source.pad_weights(list(texts), n_tokens, side),
            t("padding.running"),
        )
    except (ModelUnavailableError, ValueError) as err:
        show_error(err)
    else:
        st.caption(t("padding.seq2seq_caption"))
        for column, (kind, weight) in zip(st.columns(3), both.items(), strict=True):
            column.metric(t(f"heads.kind_{kind}"), f"{weight:.1e}")

st.subheader(t("padding.attention_header"))
first = batch.records[0]
layer, head = layer_head_picker(first.n_layer, first.n_head, key="pad")
for i, record in enumerate(batch.records):
    labels = [f"{j} {'▢ ' if token.pad else ''}{token.text}" for j, token in enumerate(record.tokens)]
    title = t("padding.sentence_title", i=i, text=plain_text(texts[i][:40]))
    head_view(record, layer, head, key=f"pad_sentence_{i}", labels=labels, title=title)

"""Generation: greedy decoding, and each generated token's attention over the prompt and earlier tokens."""

import streamlit as st

from attnviz import settings as limits
from attnviz.app.head_view import head_view
from attnviz.app.loading import cached_job, require_source, require_text
from attnviz.app.navigation import frame_settings
from attnviz.app.state import valid_choice
from attnviz.app.weights_note import generation_note, random_weights_note
from attnviz.app.widgets import layer_head_picker, plotly, show_error
from attnviz.core.token_display import markdown_text
from attnviz.errors import ModelUnavailableError
from attnviz.figures.base import head_label, make_head_heatmap_figure
from attnviz.i18n.translate import t
from attnviz.models.source import Capability
from pages.widgets.generation import encoder_decoder_steps

st.title(t("generation.title"))
settings = frame_settings()
source = require_source(settings)
if Capability.TARGET in source.capabilities:  # an encoder-decoder writes its target over the source
    require_text(settings, t("generation.type_a_source"))
    encoder_decoder_steps(source, settings)
    st.stop()
if Capability.GENERATE not in source.capabilities:
    st.info(t("generation.needs_decoder"))
    st.stop()
require_text(settings, t("generation.type_a_prompt"))

bound = limits.GENERATE_TOKENS
n_new = st.slider(t("generation.n_new"), bound.low, bound.high, value=bound.default, key="gen_new")
context = min(settings.max_tokens, limits.GENERATION_CONTEXT)
try:
    gen = cached_job(
        "generation",
        (*settings.key(context), n_new),
        lambda progress: source.generate(settings.text, n_new, context, progress=progress),
        t("generation.generating"),
    )
except ModelUnavailableError as err:
    show_error(err)
    st.stop()
record = gen.record
n_generated = len(gen.generated_ids)
random_weights_note(source)
limit = {"context": context, "limit": limits.GENERATION_CONTEXT}
if gen.prompt_truncated:
    read = markdown_text(gen.prompt_text())
    if gen.prompt_cut(context, n_new) == "room":  # the prompt was cut to leave room for the new tokens
        notice = t("generation.prompt_cut", n_input=gen.n_prompt_input, n_prompt=gen.n_prompt, n_new=n_new, **limit)
    else:  # Max tokens is no more than the tokens to generate: the model still reads one prompt token
        notice = t(
            "generation.prompt_cut_no_room", n_input=gen.n_prompt_input, n_prompt=gen.n_prompt, n_new=n_new, **limit
        )
    st.warning(t("generation.it_read", notice=notice, read=read))
    st.markdown(t("generation.continuation"))
    st.code(gen.text, language=None, wrap_lines=True)
else:
    st.markdown(t("generation.prompt_then_continuation"))
    st.code(f"{settings.text.strip()}⟦{gen.text}⟧", language=None, wrap_lines=True)
generation_note(gen.generated_ids, gen.text, source.token_texts(gen.generated_ids[:1])[0] if n_generated else "")
if gen.past_context(context):
    st.caption(t("generation.past_max_tokens", total=gen.n_prompt + n_generated, n_prompt=gen.n_prompt, **limit))
st.caption(t("generation.caption", n_prompt=gen.n_prompt, n_generated=n_generated))
layer, head = layer_head_picker(record.n_layer, record.n_head, key="gen")
labels, whole = gen.labels(), gen.labels(full=True)
rows, cols = (gen.n_prompt, record.q_len), (0, record.k_len)
n_rows = rows[1] - rows[0]
# the first step to start with; a step past the end (fewer tokens generated now) becomes the last
valid_choice("gen_step", range(1, n_rows + 1), n_rows if "gen_step" in st.session_state else 1)
step = st.slider(t("generation.step"), 1, n_rows, key="gen_step") if n_rows > 1 else 1
weights = record.weights(layer, head, rows, cols)  # (generated rows, k_len)
fig = make_head_heatmap_figure(
    weights,
    labels[rows[0] :],
    labels,
    title=t("generation.fig_title", layer=layer, head=head_label(head)),
    mask=record.mask(layer, rows, cols),
    q_hover=whole[rows[0] :],
    k_hover=whole,
)
# the step's row, outlined: row positions on a category axis are 0, 1, ...
fig.add_shape(type="rect", xref="paper", x0=0, x1=1, yref="y", y0=step - 1.5, y1=step - 0.5, line={"width": 2})
plotly(fig, key="gen_rows")
position = rows[0] + step - 1
top = weights[step - 1].topk(min(3, position + 1))  # the step sees positions 0 .. position
most = t("generation.list_sep").join(
    t("generation.weighted_token", token=markdown_text(labels[int(i)]), weight=float(w))
    for w, i in zip(*top, strict=True)
)
st.markdown(
    t(
        "generation.step_text",
        step=step,
        token=markdown_text(labels[position]),
        position=position,
        before=step - 1,
        most=most,
    )
)
st.caption(t("generation.full_resolution", rows=rows[1] - rows[0], keys=cols[1]))
with st.expander(t("generation.every_row")):
    head_view(record, layer, head, key="gen_all", labels=labels)

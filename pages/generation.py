"""Generation: greedy decoding, and each generated token's attention over the prompt and earlier tokens."""

import streamlit as st

from attnviz import settings as limits
from attnviz import ui
from attnviz.figures import make_head_heatmap_figure
from attnviz.record import head_label
from attnviz.source import ModelUnavailableError
from attnviz.token_display import markdown_text

st.title("Generation")
settings = ui.frame_settings()
source = ui.require_source(settings)
if not source.can_generate:
    st.info(
        "Generation needs a decoder with a language-model head. Pick **SmolLM2** (or a local causal LM) "
        "in the sidebar; the sidebar text is the prompt."
    )
    st.stop()
ui.require_text(settings, "Type a prompt in the sidebar.")

bound = limits.GENERATE_TOKENS
n_new = st.slider("Tokens to generate (greedy)", bound.low, bound.high, value=bound.default, key="gen_new")
context = min(settings.max_tokens, limits.GENERATION_CONTEXT)
try:
    gen = ui.cached(
        "generation",
        (*settings.key(context), n_new),
        lambda: source.generate(settings.text, n_new, context),
        "Generating…",
    )
except ModelUnavailableError as err:
    st.error(str(err))
    st.stop()
record = gen.record
if gen.prompt_truncated:
    st.warning(
        f"The prompt has {gen.n_prompt_input} tokens; the model read only its last {gen.n_prompt}, so that prompt "
        f"plus {n_new} new tokens fit in {context} tokens (**Max tokens**, at most {limits.GENERATION_CONTEXT} "
        f"here). It read: “{markdown_text(gen.prompt_text())}”"
    )
    st.markdown("The greedy continuation:")
    st.code(gen.text, language=None, wrap_lines=True)
else:
    st.markdown("**Prompt**, then the greedy continuation:")
    st.code(f"{settings.text.strip()}⟦{gen.text}⟧", language=None, wrap_lines=True)
st.caption(
    f"{gen.n_prompt} prompt tokens, {len(gen.generated_ids)} generated (✦). Row *p* is the attention of the token "
    "at position *p* while it is read, the step that predicts token *p + 1*. The tokens were decoded one at a time "
    "with the KV cache; the attention is captured from one pass over prompt + generated tokens, which gives the "
    "same rows. The grey triangle is the future, which the causal mask hides."
)
layer, head = ui.layer_head_picker(record.n_layer, record.n_head, key="gen")
labels, whole = gen.labels(), gen.labels(full=True)
rows, cols = (gen.n_prompt, record.q_len), (0, record.k_len)
n_rows = rows[1] - rows[0]
# the first step to start with; a step past the end (fewer tokens generated now) becomes the last
ui.valid_choice("gen_step", range(1, n_rows + 1), n_rows if "gen_step" in st.session_state else 1)
step = st.slider("Generation step", 1, n_rows, key="gen_step") if n_rows > 1 else 1
weights = record.weights(layer, head, rows, cols)  # (generated rows, k_len)
fig = make_head_heatmap_figure(
    weights,
    labels[rows[0] :],
    labels,
    title=f"generated tokens, L{layer} {head_label(head)}",
    mask=record.mask(layer, rows, cols),
    q_hover=whole[rows[0] :],
    k_hover=whole,
)
# the step's row, outlined: row positions on a category axis are 0, 1, ...
fig.add_shape(type="rect", xref="paper", x0=0, x1=1, yref="y", y0=step - 1.5, y1=step - 0.5, line={"width": 2})
ui.plotly(fig, key="gen_rows")
position = rows[0] + step - 1
top = weights[step - 1].topk(min(3, position + 1))  # the step sees positions 0 .. position
most = ", ".join(f"“{markdown_text(labels[int(i)])}” ({float(w):.2f})" for w, i in zip(*top, strict=True))
st.markdown(
    f"**Step {step}** (outlined): generated token “{markdown_text(labels[position])}” at position {position}, "
    f"reading the prompt and the {step - 1} tokens generated before it, puts most weight on {most}."
)
st.caption(f"Full resolution: {rows[1] - rows[0]} generated rows × {cols[1]} keys.")
with st.expander("Every row, prompt included"):
    ui.head_view(record, layer, head, key="gen_all", labels=labels)

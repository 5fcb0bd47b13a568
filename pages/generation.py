"""Generation: greedy decoding, and each generated token's attention over the prompt and earlier tokens."""

import streamlit as st

from attnviz import ui
from attnviz.figures import make_head_heatmap_figure
from attnviz.masks import causal_mask

st.title("Generation")
settings = ui.frame_settings()
model = ui.current_model(settings)
if model is None:
    st.stop()
if not model.decoder or settings.choice.embedded:
    st.info(
        "Generation needs a decoder with a language-model head. Pick **SmolLM2** (or a local causal LM) "
        "in the sidebar; the sidebar text is the prompt."
    )
    st.stop()
if not settings.text.strip():
    st.info("Type a prompt in the sidebar.")
    st.stop()

n_new = st.slider("Tokens to generate (greedy)", min_value=1, max_value=64, value=12, key="gen_new")
gen = ui.compute_generation(settings.choice, settings.text, n_new, settings.max_tokens)
record = gen.record
if gen.prompt_truncated:
    st.warning(
        f"The prompt has {gen.n_prompt_input} tokens; the model read only its last {gen.n_prompt}, so that prompt "
        f"plus {n_new} new tokens fit in **Max tokens** ({settings.max_tokens}). It read: “{gen.prompt_text()}”"
    )
    st.markdown("The greedy continuation:")
    st.code(gen.text, language=None, wrap_lines=True)
else:
    st.markdown("**Prompt**, then the greedy continuation:")
    st.code(f"{settings.text.strip()}⟦{gen.text}⟧", language=None, wrap_lines=True)
st.caption(
    f"{gen.n_prompt} prompt tokens, {len(gen.generated_ids)} generated (✦). Row *p* is the attention of the token "
    "at position *p* while it is read, the step that predicts token *p + 1*; each generated token is fed back once, "
    "so it has a row of its own. The grey triangle is the future, which the causal mask hides."
)
layer, head = ui.layer_head_picker(record.n_layer, record.n_head, key="gen")
weights = record.head_weights(layer, head)
labels = gen.labels()
rows = slice(gen.n_prompt, len(labels))
fig = make_head_heatmap_figure(
    weights[rows],
    labels[rows],
    labels,
    title=f"generated tokens, L{layer} {'mean' if head == 'mean' else f'H{head}'}",
    mask=causal_mask(len(labels) - gen.n_prompt, len(labels)),
)
ui.plotly(fig, key="gen_rows")
with st.expander("Every row, prompt included"):
    ui.plotly(make_head_heatmap_figure(weights, labels, labels, mask=record.mask), key="gen_all")

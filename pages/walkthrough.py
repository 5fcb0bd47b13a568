"""Walkthrough: one attention layer of the current model on the current text, step by step, beside the code that ran."""

import streamlit as st

from attnviz import settings as limits
from attnviz import ui, walkthrough
from attnviz.record import head_label
from attnviz.source import ModelUnavailableError, ParityUnsupportedError
from attnviz.token_display import markdown_text
from attnviz.walkthrough_figures import make_step_figure

st.title("Walkthrough: one attention layer, step by step")
st.markdown(
    "One layer of the sidebar's model, fed the hidden states that really entered it on your text, run one step at a "
    "time: each step calls the same functions `MultiHeadAttention.forward` calls, and beside it is their source, read "
    "with `inspect.getsource`, so the code you read is the code that ran. With the embedded model at d_model 512 and "
    "8 heads, step 2 gives the classic (batch, 8, seq, 64)."
)
settings = ui.frame_settings()
source = ui.require_source(settings)
ui.require_text(settings, "Type some text in the sidebar (or pick an example) to walk through its attention.")

layer, head = ui.layer_head_picker(source.n_layer, source.n_head, key="walk", with_mean=False)
view = st.radio(
    "Tensors as",
    walkthrough.VIEWS,
    key="walk_view",
    horizontal=True,
    help=f"auto: numbers up to {walkthrough.AUTO_TABLE_TOKENS} tokens, heatmaps beyond",
)
n_tokens = min(settings.max_tokens, limits.PARITY_TOKENS)
try:
    walk = ui.cached(
        "walkthrough",
        (*settings.key(n_tokens), layer),
        lambda: walkthrough.walk(source.attention_layer(settings.text, n_tokens, layer)),
        "Running the layer step by step…",
    )
except ParityUnsupportedError as err:
    st.info(
        f"This model cannot be walked through here: {markdown_text(str(err))}. The walkthrough reruns a layer with "
        "attnviz's own `MultiHeadAttention`; pick the embedded model, MiniLM or SmolLM2 in the sidebar."
    )
    st.stop()
except (ModelUnavailableError, ValueError) as err:
    st.error(markdown_text(str(err)))
    st.stop()

T = len(walk.tokens)
if walk.n_input > T:
    st.caption(f"The walkthrough reads the first {T:,} of the text's {walk.n_input:,} tokens.")
st.caption(
    f"**{markdown_text(source.name)}**, layer {layer}: {T:,} tokens, d_model {walk.d_model}, {walk.n_head} query "
    f"heads and {walk.n_kv_head} key/value heads of {walk.head_dim}, scale {walk.scale:.6g}, mask: "
    f"{walk.mask_description}. Heatmaps and tables show {head_label(head)}."
)
cols = st.columns(2)
cols[0].metric("max |steps − forward|, output", f"{walk.output_diff:.1e}")
cols[1].metric("max |steps − forward|, weights", f"{walk.weights_diff:.1e}")

numbers = walkthrough.shows_numbers(view, T)
for step in walk.steps:
    st.subheader(f"{step.number}. {step.title}")
    shown = walkthrough.step_view(step, head, walk, numbers=numbers)
    left, right = st.columns(2)
    with left:
        if numbers:
            st.dataframe(walkthrough.view_table(shown), key=f"walk_{step.key}_table")
        else:
            fig = make_step_figure(
                shown.values,
                shown.row_labels,
                shown.col_labels,
                title=walkthrough.view_title(step, head),
                axes=shown.axes,
                weights=shown.weights,
                visible=shown.visible,
            )
            ui.plotly(fig, key=f"walk_{step.key}_fig")
        if shown.note:
            st.caption(shown.note)
    with right:
        st.code(walkthrough.code_block(step), language="python", wrap_lines=True)
    st.caption(f"{walkthrough.shapes_caption(step)}. {step.change}")

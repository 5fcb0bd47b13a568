"""Walkthrough: one attention layer of the current model on the current text, step by step, beside the code that ran."""

import streamlit as st

from attnviz import exports, ui, walkthrough
from attnviz import settings as limits
from attnviz.i18n import language, t
from attnviz.record import head_label
from attnviz.source import ModelUnavailableError, ParityUnsupportedError
from attnviz.token_display import markdown_text
from attnviz.walkthrough_figures import make_step_figure

st.title(t("walkthrough.title"))
st.markdown(t("walkthrough.intro"))
settings = ui.frame_settings()
source = ui.require_source(settings)
ui.require_text(settings, t("walkthrough.type_text"))

ui.link_layer_head("walk", range(source.n_layer), range(source.n_head))
layer, head = ui.layer_head_picker(source.n_layer, source.n_head, key="walk", with_mean=False)
ui.keep_layer_head_in_link(layer, head)
view = st.radio(
    t("walkthrough.tensors_as"),
    walkthrough.VIEWS,
    key="walk_view",
    horizontal=True,
    format_func={v: t(f"walkthrough.view_{v}") for v in walkthrough.VIEWS}.get,
    help=t("walkthrough.view_help", n=walkthrough.AUTO_TABLE_TOKENS),
)
n_tokens = min(settings.max_tokens, limits.PARITY_TOKENS)
try:
    walk = ui.cached(
        "walkthrough",
        (*settings.key(n_tokens), layer, language()),  # the steps' sentences are in the session's language
        lambda: walkthrough.walk(source.attention_layer(settings.text, n_tokens, layer)),
        t("walkthrough.running"),
    )
except ParityUnsupportedError as err:
    st.info(t("walkthrough.unsupported", error=markdown_text(str(err))))
    st.stop()
except (ModelUnavailableError, ValueError) as err:
    st.error(markdown_text(str(err)))
    st.stop()

T = len(walk.tokens)
if walk.n_input > T:
    st.caption(t("walkthrough.reads_first", T=T, n_input=walk.n_input))
st.caption(
    t(
        "walkthrough.caption",
        model=markdown_text(source.name),
        layer=layer,
        T=T,
        d_model=walk.d_model,
        n_head=walk.n_head,
        n_kv_head=walk.n_kv_head,
        head_dim=walk.head_dim,
        scale=walk.scale,
        mask=walk.mask_description,
        head=head_label(head),
    )
)
cols = st.columns(2)
cols[0].metric(t("walkthrough.diff_output"), f"{walk.output_diff:.1e}")
cols[1].metric(t("walkthrough.diff_weights"), f"{walk.weights_diff:.1e}")
ui.export_menu("walk_export", tensors=exports.walkthrough_export(walk, head))  # every step's tensors, every head

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

"""Walkthrough: one attention layer of the current model on the current text, step by step, beside the code that ran."""

import streamlit as st

from attnviz import settings as limits
from attnviz.app import exports
from attnviz.app.links import keep_layer_head_in_link, link_layer_head
from attnviz.app.loading import cached_job, require_source, require_text
from attnviz.app.navigation import frame_settings
from attnviz.app.widgets import export_menu, layer_head_picker, plotly, show_error, show_info
from attnviz.core.token_display import markdown_text
from attnviz.errors import ModelUnavailableError, ParityUnsupportedError
from attnviz.figures.base import head_label
from attnviz.figures.walkthrough import make_step_figure
from attnviz.i18n.message import msg
from attnviz.i18n.translate import t, tr
from attnviz.labs.walkthrough import views
from attnviz.labs.walkthrough.steps import walk_source

st.title(t("walkthrough.title"))
st.markdown(t("walkthrough.intro"))
settings = frame_settings()
source = require_source(settings)
require_text(settings, t("walkthrough.type_text"))

link_layer_head("walk", range(source.n_layer), range(source.n_head))
layer, head = layer_head_picker(source.n_layer, source.n_head, key="walk", with_mean=False)
keep_layer_head_in_link(layer, head)
view = st.radio(
    t("walkthrough.tensors_as"),
    views.VIEWS,
    key="walk_view",
    horizontal=True,
    format_func={v: t(f"walkthrough.view_{v}") for v in views.VIEWS}.get,
    help=t("walkthrough.view_help", n=views.AUTO_TABLE_TOKENS),
)
n_tokens = min(settings.max_tokens, limits.PARITY_TOKENS)
try:
    walk = cached_job(
        "walkthrough",
        (*settings.key(n_tokens), layer),  # the steps' sentences are messages: one walk serves every language
        lambda progress: walk_source(source, settings.text, n_tokens, layer, progress),
        t("walkthrough.running"),
    )
except ParityUnsupportedError as err:
    show_info(msg("walkthrough.unsupported", error=err))
    st.stop()
except (ModelUnavailableError, ValueError) as err:
    show_error(err)
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
        mask=tr(walk.mask_description),
        head=head_label(head),
    )
)
cols = st.columns(2)
cols[0].metric(t("walkthrough.diff_output"), f"{walk.output_diff:.1e}")
cols[1].metric(t("walkthrough.diff_weights"), f"{walk.weights_diff:.1e}")
export_menu("walk_export", tensors=exports.walkthrough_export(walk, head))  # every step's tensors, every head

numbers = views.shows_numbers(view, T)
for step in walk.steps:
    st.subheader(f"{step.number}. {tr(step.title)}")
    shown = views.step_view(step, head, walk, numbers=numbers)
    left, right = st.columns(2)
    with left:
        if numbers:
            st.dataframe(views.view_table(shown), key=f"walk_{step.key}_table")
        else:
            fig = make_step_figure(
                shown.values,
                shown.row_labels,
                shown.col_labels,
                title=views.view_title(step, head),
                axes=shown.axes,
                weights=shown.weights,
                visible=shown.visible,
            )
            plotly(fig, key=f"walk_{step.key}_fig")
        if shown.note:
            st.caption(tr(shown.note))
    with right:
        st.code(tr(views.code_block(step)), language="python", wrap_lines=True)
    st.caption(f"{tr(views.shapes_caption(step))}. {tr(step.change)}")

"""Ablation: knock heads out and see what the model's output loses, on the sidebar's text."""

import streamlit as st

from attnviz.app.loading import cached_job, kind_picker, require_source, target_inputs
from attnviz.app.navigation import frame_settings
from attnviz.app.state import valid_choice
from attnviz.app.widgets import show_error, show_info
from attnviz.errors import ModelUnavailableError
from attnviz.i18n.message import msg
from attnviz.i18n.translate import t
from attnviz.labs.heads_matter.common import token_limit
from attnviz.labs.heads_matter.effect import ablation_effect, effect_need
from attnviz.settings import ABLATION_TOKENS
from pages.widgets.ablation import estimate_section, limit_text, show_result, sweep_section

st.title(t("ablation.title"))
settings = frame_settings()
source = require_source(settings)
view_key: tuple = ()
if (kind := kind_picker(source, "ablation_kind", "ablation.kind")) is not None:  # one kind's heads, on the target
    target, n_generate = target_inputs()
    if not n_generate and not target.strip():
        st.info(t("sources.type_target"))
        st.stop()
    st.caption(t("ablation.on_target"))
    source, view_key = source.ablation_view(kind, target, n_generate), (kind, target, n_generate)
n_tokens = token_limit(settings.max_tokens)
limit = limit_text("ablation.limit", n_tokens, settings.max_tokens, ABLATION_TOKENS)
st.caption(t("ablation.intro", limit=limit))
if not source.ablation_modes:
    show_info(msg("ablation.unsupported", name=source.name, note=source.route_note))
    st.stop()
if not source.encode(settings.text, n_tokens).tokens:
    show_info(msg("ablation_lib.no_tokens"))
    st.stop()

valid_choice("ablation_mode", source.ablation_modes, source.ablation_modes[0])
mode = st.radio(
    t("ablation.mode"),
    source.ablation_modes,
    horizontal=True,
    key="ablation_mode",
    format_func=lambda name: t(f"ablation.mode_{name}"),
)
all_heads = [(layer, head) for layer in range(source.n_layer) for head in range(source.n_head)]
valid_choice("ablation_layers", range(source.n_layer), [])
valid_choice("ablation_heads", all_heads, [])
left, right = st.columns(2)
layers = left.multiselect(
    t("ablation.layers"),
    range(source.n_layer),
    key="ablation_layers",
    format_func="L{}".format,
    placeholder=t("ablation.pick_layers"),
)
picked = right.multiselect(
    t("ablation.heads"),
    all_heads,
    key="ablation_heads",
    format_func="{0[0]}.{0[1]}".format,
    placeholder=t("ablation.pick_heads"),
)
heads = [(layer, head) for layer, head in all_heads if layer in layers or (layer, head) in picked]

if not heads:
    st.info(t("ablation.nothing"))
else:
    try:
        result = cached_job(
            "ablation",
            (settings.spec, settings.text, n_tokens, mode, tuple(heads), *view_key),
            lambda progress: ablation_effect(source, settings.text, n_tokens, heads, mode),
            t("ablation.ablating", n=len(heads)),
            effect_need(source, n_tokens),
        )
    except (ModelUnavailableError, ValueError) as err:
        show_error(err)
        result = None
    if result is not None:
        show_result(result, source.name)

try:
    estimate_section(source, settings, mode, view_key)
except (ModelUnavailableError, ValueError) as err:
    show_error(err)
try:
    sweep_section(source, settings, mode, view_key)
except (ModelUnavailableError, ValueError) as err:
    show_error(err)

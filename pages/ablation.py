"""Ablation: knock heads out and see what the model's output loses, on the sidebar's text."""

import streamlit as st

from attnviz.app.loading import cached_job, require_source, result_cache
from attnviz.app.navigation import frame_settings
from attnviz.app.state import valid_choice
from attnviz.app.widgets import plotly, show_error, show_info
from attnviz.core.admission import Need
from attnviz.errors import ModelUnavailableError
from attnviz.figures.ablation import make_ablation_sweep_figure
from attnviz.i18n.message import msg
from attnviz.i18n.translate import t
from attnviz.labs import ablation
from pages.widgets.ablation import show_result

st.title(t("ablation.title"))
settings = frame_settings()
source = require_source(settings)
n_tokens = ablation.token_limit(settings.max_tokens)
st.caption(t("ablation.intro", tokens=n_tokens))
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
            (settings.spec, settings.text, n_tokens, mode, tuple(heads)),
            lambda progress: ablation.ablation_effect(source, settings.text, n_tokens, heads, mode),
            t("ablation.ablating", n=len(heads)),
        )
    except (ModelUnavailableError, ValueError) as err:
        show_error(err)
        result = None
    if result is not None:
        show_result(result, source.name)

st.subheader(t("ablation.sweep"))
sweep_tokens = ablation.token_limit(settings.max_tokens, ablation.SWEEP_TOKENS)
seconds = ablation.sweep_seconds(source, sweep_tokens)
sweep_key = (settings.spec, settings.text, sweep_tokens, mode)
st.caption(
    t(
        "ablation.sweep_caption",
        n=len(all_heads),
        tokens=sweep_tokens,
        limit=ablation.SWEEP_TOKENS,
        seconds=seconds,
        rows=ablation.PASS_ROWS,
    )
)
# the switch runs the sweep it was turned on for: another text, mode or model asks again (minutes each)
if st.session_state.get("ablation_sweep_run") and st.session_state.get("ablation_sweep_for") != sweep_key:
    st.session_state["ablation_sweep_run"] = False
if ("ablation_sweep", sweep_key) in result_cache() or st.toggle(
    t("ablation.sweep_run", n=len(all_heads), seconds=seconds),
    key="ablation_sweep_run",
    on_change=lambda: st.session_state.update(ablation_sweep_for=sweep_key),
):
    try:
        sweep = cached_job(
            "ablation_sweep",
            sweep_key,
            lambda progress: ablation.ablation_sweep(source, settings.text, sweep_tokens, mode, progress),
            t("ablation.sweeping"),
            Need(ablation.sweep_bytes(source, sweep_tokens), seconds),
        )
        plotly(make_ablation_sweep_figure(sweep), key="ablation_sweep")
    except (ModelUnavailableError, ValueError) as err:
        show_error(err)

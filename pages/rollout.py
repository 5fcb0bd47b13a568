"""Rollout and flow: how much each output token draws on each input token through the layers (Abnar & Zuidema
2020), beside one layer's head-averaged weights."""

import streamlit as st

from attnviz.app.loading import cached, cached_job, current_record, require_source, result_cache
from attnviz.app.navigation import frame_settings
from attnviz.app.progress import probed, quote
from attnviz.app.state import valid_choice
from attnviz.app.widgets import plotly, show_info
from attnviz.figures.rollout import COLOURS, colour_note, colour_scale, make_rollout_figure
from attnviz.i18n.translate import t, tr
from attnviz.labs import rollout

st.title(t("rollout.title"))
settings = frame_settings()
record = current_record(settings)
if record is None:
    st.stop()
source = require_source(settings)
n = min(record.q_len, rollout.ROLLOUT_TOKENS)
try:
    maps = cached(
        "rollout",
        (*settings.key(), rollout.ROLLOUT_TOKENS),
        lambda: rollout.rollout_maps(record, device=source.device),
        t("rollout.computing", n=n, n_layer=record.n_layer),
        need=rollout.rollout_need(record, source),
    )
except ValueError as err:  # a capture with neither q and k nor weights
    show_info(err)
    st.stop()

kinds = {kind: t(f"rollout.kind_{kind}") for kind in rollout.KINDS}
colours = {colour: t(f"rollout.colour_{colour}") for colour in COLOURS}
cols = st.columns([3, 1, 1])
kind = cols[0].radio(t("rollout.kind"), list(kinds), key="rollout_kind", format_func=kinds.get, horizontal=True)
layer_key = f"rollout_layer_{maps.n_layer}"  # one choice per depth: another model starts at its own last layer
valid_choice(layer_key, range(maps.n_layer), maps.n_layer - 1)
layer = cols[1].selectbox(t("rollout.layer"), range(maps.n_layer), key=layer_key, format_func=lambda i: f"L{i}")
colour = cols[2].selectbox(
    t("rollout.colour"), list(colours), key="rollout_colour", format_func=colours.get, help=t("rollout.colour_help")
)

st.caption(t("rollout.assumptions", residual=rollout.RESIDUAL))
bound = t("rollout.bound", n=maps.n_tokens, q_len=maps.q_len, limit=rollout.ROLLOUT_TOKENS)
if maps.truncated and not maps.causal:
    bound += " " + t("rollout.bound_encoder", n=maps.n_tokens)
st.caption(bound)
if record.n_layer < source.n_layer:
    st.caption(t("rollout.hybrid", n_attention=record.n_layer, n_layer=source.n_layer))

if kind == "flow":
    weights = rollout.flow_input(maps, layer)  # (layer + 1, T_f, T_f)
    n_flow = weights.shape[-1]
    edges = rollout.flow_edges(layer + 1, n_flow, maps.causal)
    limits = {"limit": rollout.FLOW_TOKENS, "work": rollout.FLOW_MAX_WORK / 1e6, "edges": edges}
    bound = t("rollout.flow_bound", n=n_flow, q_len=maps.q_len, **limits)
    if n_flow < maps.q_len and not maps.causal:
        bound += " " + t("rollout.bound_encoder", n=n_flow)
    st.caption(bound)
    flow_key = (*settings.key(), rollout.ROLLOUT_TOKENS, layer)
    need = rollout.flow_need(layer + 1, n_flow, maps.causal)
    ask = st.empty()  # the estimate and the button, gone once the flow is drawn (the progress bar times the run)
    if ("rollout_flow", flow_key) not in result_cache():
        timing = t("rollout.flow_timing")
        # timed once on this graph (0.5 s, admitted like any request), then scaled by the machine as it is now
        name = ("rollout_flow_seconds", flow_key)
        probe = rollout.flow_probe_need(layer + 1, n_flow, maps.causal)
        timed = cached(name[0], flow_key, probed(name, lambda: rollout.measured_flow_seconds(weights)), timing, probe)
        seconds = quote(name, timed).seconds
        with ask.container():
            st.caption(t("rollout.flow_estimate", seconds=seconds, work=rollout.flow_work_of(weights) / 1e6))
            if seconds > rollout.FLOW_CONFIRM_SECONDS and not st.button(
                t("rollout.flow_run", seconds=seconds), key="rollout_flow_run"
            ):
                st.stop()
        need = rollout.flow_need(layer + 1, n_flow, maps.causal, seconds)
    values = cached_job(
        "rollout_flow",
        flow_key,
        lambda progress: rollout.flow_map(maps, layer, progress),
        t("rollout.flow_computing", n=n_flow),
        need=need,
    )
    ask.empty()
    mask = maps.reach[layer, :n_flow, :n_flow]
elif kind == "rollout":
    values, mask = maps.rollout[layer], maps.reach[layer]
else:
    values, mask = maps.layer_mean[layer], record.mask(layer, (0, maps.n_tokens), (0, maps.n_tokens))
tokens = record.tokens[: values.shape[0]]
scale = colour_scale(values, mask, colour)
plotly(make_rollout_figure(values, tokens, kind=kind, layer=layer, mask=mask, colour=scale), key="rollout_map")
st.caption(t(f"rollout.reading_{kind}", layer=layer) + " " + tr(colour_note(scale)))

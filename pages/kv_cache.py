"""KV cache: exact memory for real model configs, checked against real caches, decode speed, and MHA -> GQA."""

import streamlit as st

from attnviz import settings as limits
from attnviz.app.navigation import frame_settings
from attnviz.app.widgets import plotly, table
from attnviz.core.token_display import markdown_text
from attnviz.figures.kv import length_curves, make_engine_figure, make_head_grouping_figure, make_kv_length_figure
from attnviz.i18n.translate import t, tr
from attnviz.labs.kv.agreement import transformers_agreement
from attnviz.labs.kv.config import KV_DTYPES
from attnviz.labs.kv.engines import engine_estimates
from attnviz.labs.kv.memory import (
    KIND_TABLE_HEADERS,
    curve_lengths,
    estimate,
    human_bytes,
    kind_table,
    max_fit,
    weight_bytes,
)
from attnviz.labs.kv.report import describe_agreement, describe_engines, describe_fit
from pages.widgets.kv_cache import block_label, gpu_memory_input, kv_checks, kv_config_input, kv_engine_knobs

st.title(t("kv_cache.title"))
st.markdown(t("kv_cache.intro"))
settings = frame_settings()
cfg = kv_config_input(settings)

cols = st.columns(5)
batch = cols[0].number_input(t("kv_cache.batch"), 1, 4096, 1, key="kv_batch")
longest = cfg.max_positions or limits.KV_DEFAULT_SEQ_LEN
seq_len = cols[1].number_input(t("kv_cache.seq_len"), 1, limits.KV_MAX_SEQ_LEN, min(8192, longest), key="kv_seq_len")
dtype = cols[2].selectbox(t("kv_cache.dtype"), KV_DTYPES, index=KV_DTYPES.index("bf16"), key="kv_dtype")
group = cols[3].number_input(
    t("kv_cache.group"), 1, 4096, limits.KV_GROUP_SIZE, key="kv_group", help=t("kv_cache.group_help")
)
block = cols[4].selectbox(
    t("kv_cache.block"),
    [None, 16, 32, 64, 128, 256],
    format_func=block_label,
    key="kv_block",
    help=t("kv_cache.block_help"),
)
est = estimate(cfg, batch, seq_len, dtype, group, block)
if cfg.max_positions and seq_len > cfg.max_positions:
    st.warning(t("kv_cache.too_long", seq_len=seq_len, max_positions=cfg.max_positions))

st.subheader(f"{tr(cfg.name, escape=markdown_text)}: {cfg.attention.upper()}")
cols = st.columns(4)
cols[0].metric(t("kv_cache.bytes_per_token"), f"{est.bytes_per_token:,}", help=t("kv_cache.bytes_per_token_help"))
cols[1].metric(t("kv_cache.total", batch=batch, seq_len=seq_len), human_bytes(est.total_bytes))
weights = weight_bytes(cfg, "bf16")
cols[2].metric(
    t("kv_cache.weights"), human_bytes(weights) if weights else t("kv_cache.unknown"), help=t("kv_cache.weights_help")
)
if cfg.attention == "mla":  # what is stored: one latent and one RoPE key a token, shared by every head
    cols[3].metric(
        t("kv_cache.shape_mla"),
        f"{cfg.n_layer} · {cfg.kv_lora_rank} · {cfg.qk_rope_head_dim}",
        help=t("kv_cache.shape_mla_help"),
    )
else:
    cols[3].metric(t("kv_cache.shape"), f"{cfg.n_layer} · {cfg.n_kv_head} · {cfg.head_dim}")
table(kind_table(cfg, est, dtype, group), key="kv_kinds", headers=KIND_TABLE_HEADERS, hide_index=True, width="stretch")
for note in cfg.notes:
    st.caption(tr(note, escape=markdown_text))

st.subheader(t("kv_cache.engines"))
with st.expander(t("kv_cache.engine_settings")):
    knobs = kv_engine_knobs()
with st.spinner(t("kv_speed.engines_spinner")):  # the first time per config: transformers' modeling code loads
    engines = engine_estimates(cfg, batch, seq_len, dtype, **knobs)
    agreement = transformers_agreement(cfg, batch, seq_len, dtype, block, group)  # None: no transformers figure
left, right = st.columns([3, 2])
with left:
    drawn = [(e.engine, e.total_bytes) for e in engines if e.total_bytes is not None]
    plotly(make_engine_figure(est.total_bytes, drawn), "kv_engines")
with right:
    st.markdown(tr(describe_engines(est.total_bytes, engines)))
    if agreement is not None:  # the minimum beside transformers' figure: the same bytes, or why not
        st.markdown(tr(describe_agreement(agreement)))

st.subheader(t("kv_cache.curves"))
lengths = curve_lengths(max(seq_len, longest, 4 * (cfg.window or 0)))  # past a window, to show its plateau
curves = length_curves(cfg, lengths, batch, dtype, group, block)
gpu_gb = gpu_memory_input()
fit = max_fit(cfg, round(gpu_gb * 10**9), dtype, seq_len=seq_len, group_size=group, block_size=block)
free = fit["free_bytes"]
plotly(
    make_kv_length_figure(curves, gpu_bytes=free if free > 0 else None),
    "kv_lengths",
)
st.caption(tr(describe_fit(fit, gpu_gb)))

st.subheader(t("kv_cache.sharing"))
if cfg.attention == "mla":
    st.info(t("kv_cache.mla", rank=cfg.kv_lora_rank, rope=cfg.qk_rope_head_dim, n_head=cfg.n_head))
else:
    plotly(make_head_grouping_figure(cfg.n_head, cfg.n_kv_head), "kv_groups")

kv_checks(settings)

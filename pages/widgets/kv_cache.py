"""The KV cache page's own widgets: which config to size, the GPU, the engines' knobs, and the checks on the
sidebar's model (its real cache, decode speed, MHA -> GQA)."""

from __future__ import annotations

import copy

import streamlit as st

from attnviz import settings
from attnviz.app import hosted
from attnviz.app.loading import cached, current_source, require_source, target_inputs
from attnviz.app.state import Settings
from attnviz.app.widgets import plotly, show_error, show_info, tab_picker, table
from attnviz.core.token_display import markdown_text
from attnviz.errors import ConfigError, ModelUnavailableError
from attnviz.figures.kv import make_decode_figure, make_whatif_figure
from attnviz.i18n.message import msg
from attnviz.i18n.translate import t, tr
from attnviz.labs.kv.config import KVConfig, config_from_dict, kv_config_of, load_config, parse_config_json
from attnviz.labs.kv.encoder_decoder import CHECK_HEADERS, seq2seq_cache_check
from attnviz.labs.kv.gqa import gqa_whatif
from attnviz.labs.kv.measure import decode_timing
from attnviz.labs.kv.presets import PRESETS
from attnviz.labs.kv.report import KV_MEASURE_LENGTHS, MEASURED_HEADERS, measured_vs_estimated, whatif_summary
from attnviz.models.registry import BUNDLED_CHOICES
from attnviz.models.source import Capability

KV_DEFAULT_PRESET = "gemma-2-9b"  # sliding and full layers: the plateau, and engines that differ
KV_SOURCES = ("preset", "bundled", "upload", "folder", "sidebar")  # titled by kv_ui.source_<how>


def block_label(block: int | None) -> str:
    return t("kv_ui.contiguous") if block is None else t("kv_ui.paged", block=block)


def kv_config_input(settings_: Settings) -> KVConfig:
    """The KV cache page's model config, from a preset, a bundled model, a file, a folder or the sidebar's model.

    Stops the page with a message when the config cannot be read or understood.
    """
    how = st.radio(
        t("kv_ui.model"),
        [how for how in KV_SOURCES if how != "folder" or not hosted.is_hosted()],  # hosted: no server paths
        format_func=lambda how: t(f"kv_ui.source_{how}"),
        horizontal=True,
        key="kv_source",
    )
    try:
        if how == "preset":
            keys = list(PRESETS)
            key = st.selectbox(
                t("kv_ui.preset"),
                keys,
                index=keys.index(KV_DEFAULT_PRESET) if KV_DEFAULT_PRESET in keys else 0,
                format_func=lambda k: tr(PRESETS[k].shown_title),
                key="kv_preset",
            )
            preset = PRESETS[key]
            st.caption(t("kv_ui.preset_caption", source=preset.source, note=preset.note))
            return config_from_dict(copy.deepcopy(preset.config), name=preset.shown_title)
        if how == "bundled":
            key = st.selectbox(
                t("kv_ui.bundled"), list(BUNDLED_CHOICES), format_func=BUNDLED_CHOICES.get, key="kv_bundled"
            )
            return load_config(key)
        if how == "upload":
            file = st.file_uploader("config.json", type=["json"], key="kv_upload")
            text = st.text_area(t("kv_ui.paste"), key="kv_paste", height=120)
            if file is not None:
                return config_from_dict(parse_config_json(file.getvalue(), file.name), name=file.name)
            if text.strip():
                return config_from_dict(parse_config_json(text, t("kv_ui.pasted_what")), name=t("kv_ui.pasted_name"))
            st.info(t("kv_ui.upload_or_paste"))
            st.stop()
        if how == "folder":
            folder = st.text_input(t("kv_ui.folder"), key="kv_folder")
            if not folder.strip():
                st.info(t("kv_ui.type_folder"))
                st.stop()
            return load_config(folder.strip())
        source = require_source(settings_)
        st.caption(t("kv_ui.sidebar_caption"))
        return kv_config_of(source)
    except (ConfigError, ModelUnavailableError) as err:
        show_error(msg("kv_ui.config_error", error=err))
        st.stop()


GPU_PRESETS_GB = {
    24: "24 GB (RTX 4090)",
    40: "40 GB (A100 40GB)",
    48: "48 GB (L40S)",
    80: "80 GB (A100/H100)",
    141: "141 GB (H200)",
    192: "192 GB (B200)",
    0: "another size…",
}


def gpu_memory_input() -> float:
    """A GPU's memory in GB (10**9 bytes): a preset, or a size the user types."""
    cols = st.columns([2, 1])
    choice = cols[0].selectbox(
        t("kv_ui.gpu"),
        list(GPU_PRESETS_GB),
        index=3,
        format_func=lambda gb: GPU_PRESETS_GB[gb] if gb else t("kv_ui.gpu_other"),
        key="kv_gpu",
    )
    if choice:
        return float(choice)
    return float(cols[1].number_input("GB", 1.0, 100_000.0, 80.0, key="kv_gpu_gb"))


def kv_engine_knobs() -> dict:
    """The serving engines' settings that change what they allocate."""
    cols = st.columns(4)
    return {
        "vllm_block_size": cols[0].number_input(
            t("kv_ui.vllm_block"), 1, 1024, settings.KV_VLLM_BLOCK_SIZE, key="kv_vb"
        ),
        "vllm_max_num_batched_tokens": cols[1].number_input(
            t("kv_ui.vllm_batched"), 1, 2**20, settings.KV_VLLM_MAX_NUM_BATCHED_TOKENS, key="kv_vbt"
        ),
        "vllm_hybrid_allocator": cols[2].toggle(t("kv_ui.vllm_hybrid"), True, key="kv_hybrid"),
        "llamacpp_n_ubatch": cols[3].number_input(
            t("kv_ui.llamacpp_ubatch"), 1, 2**16, settings.KV_LLAMACPP_N_UBATCH, key="kv_ub"
        ),
    }


KV_DECODE_TOKENS = (32, 64, 128)  # what one visitor may time on the page; docs/kv-cache.md has 512 and 1,024


def kv_checks(settings_: Settings) -> None:
    """The checks on the sidebar's model: its real cache against the estimate, decode speed, and MHA -> GQA."""
    st.subheader(
        t("kv_ui.checked", model=markdown_text(tr(settings_.spec.title)) if settings_.spec else t("kv_ui.no_model"))
    )
    source = current_source(settings_)
    if source is None:
        return
    if not settings_.text.strip():  # every check below runs the model on the sidebar's text
        show_info(msg("page_extremes.kv_checks_need_text"))
        return
    if Capability.TARGET in source.capabilities:
        encoder_decoder_check(source, settings_)
        return
    shown = tab_picker(["kv_ui.tab_measured", "kv_ui.tab_speed", "kv_ui.tab_whatif"], "kv_tab")  # the open one runs
    if shown == "kv_ui.tab_measured":
        st.markdown(t("kv_ui.measured_intro"))
        if st.toggle(t("kv_ui.measure"), key="kv_measure"):
            try:
                checks = cached(
                    "kv_measured",
                    settings_.key(),
                    lambda: measured_vs_estimated(source, settings_.text, KV_MEASURE_LENGTHS),
                    t("kv_ui.measure_spinner"),
                )
            except (ValueError, ModelUnavailableError) as err:
                show_info(msg("kv_ui.no_cache", error=err))
            else:
                table(checks, key="kv_measured_table", headers=MEASURED_HEADERS, hide_index=True, width="stretch")
                worst = int(checks["error (bytes)"].abs().max())
                st.caption(t("kv_ui.largest_error", worst=worst, n=len(checks)))
    elif shown == "kv_ui.tab_speed":
        n_new = st.radio(t("kv_ui.n_new"), KV_DECODE_TOKENS, horizontal=True, key="kv_decode_n")
        if st.toggle(t("kv_ui.decode"), key="kv_decode"):
            try:
                timings = cached(
                    "kv_decode",
                    (*settings_.key(), n_new),
                    lambda: {m: decode_timing(source, settings_.text, n_new, m) for m in ("cache", "recompute")},
                    t("kv_ui.decode_spinner", n=n_new),
                )
            except (ValueError, ModelUnavailableError) as err:
                show_info(msg("kv_ui.cannot_decode", error=err))
            else:
                cache, recompute = timings["cache"], timings["recompute"]
                lines = {
                    t("kv_ui.with_cache", s=cache.total): cache.seconds_per_token,
                    t("kv_ui.recomputing", s=recompute.total): recompute.seconds_per_token,
                }
                plotly(make_decode_figure(lines), "kv_decode_fig")
                speedup = timings["recompute"].total / timings["cache"].total
                st.caption(t("kv_ui.speedup", speedup=speedup, n=n_new))
    else:
        st.markdown(t("kv_ui.whatif_intro"))
        layer = st.selectbox(
            t("kv_ui.layer"), range(source.n_layer), format_func=lambda i: f"L{i}", key="kv_whatif_layer"
        )
        try:
            whatif_layers = cached(
                "kv_whatif",
                (*settings_.key(), layer),
                lambda: gqa_whatif(source.attention_layer(settings_.text, settings_.max_tokens, layer)),
                t("kv_ui.whatif_spinner"),
            )
        except (ValueError, ModelUnavailableError) as err:
            show_info(msg("kv_ui.not_for_model", error=err))
        else:
            summary = whatif_summary(whatif_layers)
            if summary.empty:
                st.info(t("kv_ui.single_kv_head"))
            else:
                plotly(make_whatif_figure(summary), "kv_whatif_fig")
                table(summary, key="kv_whatif_table", hide_index=True, width="stretch")


def encoder_decoder_check(source, settings_: Settings) -> None:
    """An encoder-decoder's cache on the sidebar's source and target: the decoder's self-attention part (grows
    with the target) and its cross-attention part (fixed by the source), estimated and measured after a prefill."""
    st.markdown(t("kv_ui.seq2seq_intro"))
    target, n_generate = target_inputs()
    if not n_generate and not target.strip():
        st.info(t("sources.type_target"))
        return
    try:
        checks = cached(
            "kv_seq2seq",
            (*settings_.key(), target, n_generate),
            lambda: seq2seq_cache_check(source, settings_.text, target, settings_.max_tokens, n_generate),
            t("kv_ui.measure_spinner"),
        )
    except (ValueError, ModelUnavailableError) as err:
        show_info(msg("kv_ui.no_cache", error=err))
        return
    table(checks, key="kv_seq2seq_table", headers=CHECK_HEADERS, hide_index=True, width="stretch")
    st.caption(t("kv_ui.seq2seq_caption", worst=int(checks["error (bytes)"].abs().max())))

"""The Side by side page's own widgets: what B is (a second text, a second model, another mask)."""

from __future__ import annotations

import dataclasses

import streamlit as st

from attnviz import settings as limits
from attnviz.app import hosted
from attnviz.app.loading import source_for
from attnviz.app.sidebar import ALLOW_PICKLE
from attnviz.app.state import Settings, valid_choice
from attnviz.app.widgets import show_info
from attnviz.i18n.translate import t
from attnviz.labs import compare
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.record import AttentionRecord
from attnviz.models.registry import EMBEDDED, SourceSpec
from attnviz.models.source import AttentionSource

TEXT_B = "The dog sat on the mat because it was hungry."  # short: the default B costs next to nothing


def choose_b(settings: Settings, record_a: AttentionRecord, source_a: AttentionSource) -> Settings:
    """The mode radio and B's own input; B's settings (text, model), or the page stops after saying why B cannot be
    compared with A (an empty text, another tokenizer, a mask that is not a setting of the model)."""
    mode = st.radio(
        t("compare.mode"),
        compare.MODES,
        key="compare_mode",
        horizontal=True,
        format_func=lambda m: t(f"compare.mode_{m}"),
    )
    text_b, spec_b = settings.text, settings.spec
    if mode == "texts":
        if "compare_text_b" not in st.session_state:
            st.session_state.compare_text_b = TEXT_B
        text_b = st.text_area(t("compare.text_b"), key="compare_text_b", height=90)
        if not text_b.strip():
            st.info(t("compare.type_text_b"))
            st.stop()
    elif mode == "models":
        spec_b = _model_b(settings)
        source_b = source_for(spec_b)
        if source_b is None:
            st.stop()
        read_a, read_b = (s.encode(settings.text, settings.max_tokens) for s in (source_a, source_b))
        if not compare.same_tokens(read_a, read_b):
            show_info(compare.tokens_differ(source_a.name, source_b.name, read_a, read_b))
            st.stop()
    else:
        masks = [compare.mask_name(True), compare.mask_name(False)]
        valid_choice("compare_mask_b", masks, compare.mask_name(not record_a.causal))
        mask_b = st.radio(
            t("compare.mask_b"),
            masks,
            key="compare_mask_b",
            horizontal=True,
            format_func=lambda m: t(f"compare.mask_{m}"),
        )
        spec_b = compare.mask_variant(settings.spec, mask_b == compare.mask_name(True))
        if spec_b is None:
            st.info(t("compare.masks_unsupported"))
            st.stop()
        if spec_b == settings.spec:
            st.caption(t("compare.same_mask"))
    return Settings(text=text_b, max_tokens=settings.max_tokens, spec=spec_b)


def _model_b(settings: Settings) -> SourceSpec:
    """Model B as chosen: the embedded model at the sidebar's sizes under another seed, a bundled model or a folder."""
    offered = list(hosted.model_options())
    valid_choice("compare_model_b", offered, EMBEDDED)
    choice = st.selectbox(t("compare.model_b"), offered, key="compare_model_b", format_func=hosted.model_label)
    if choice == EMBEDDED:  # the same tokenizer by construction
        valid_choice("compare_seed_b", range(limits.SEED.low, limits.SEED.high + 1), 1)
        seed_b = st.number_input(t("compare.seed_b"), limits.SEED.low, limits.SEED.high, key="compare_seed_b", step=1)
        config = dataclasses.replace(settings.spec.config or EmbeddedConfig(), seed=int(seed_b))
        return SourceSpec(EMBEDDED, settings.spec.device, config)
    name = st.text_input(t("compare.model_path_b"), key="compare_model_path_b") if choice == "path" else choice
    if not name.strip():
        st.info(t("compare.type_path_b"))
        st.stop()
    trusted = choice == "path" or choice in hosted.operator_models()
    return SourceSpec(name.strip(), settings.spec.device, allow_pickle=ALLOW_PICKLE and trusted)

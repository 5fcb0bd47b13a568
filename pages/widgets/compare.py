"""The Side by side page's own widgets: what B is (a second text, a second model, another mask), the comparison
run with its measured estimate and progress, and the head shown in A and B."""

from __future__ import annotations

import streamlit as st

from attnviz import settings as limits
from attnviz.app import hosted
from attnviz.app.loading import cached_job, load_source, result_cache, source_for
from attnviz.app.progress import duration_text
from attnviz.app.sidebar import ALLOW_PICKLE
from attnviz.app.state import Settings, valid_choice
from attnviz.app.widgets import show_info
from attnviz.core.devices import Placement
from attnviz.core.token_display import markdown_text
from attnviz.errors import ModelUnavailableError
from attnviz.figures.compare import selected_head
from attnviz.i18n.translate import t
from attnviz.labs import compare
from attnviz.models.record import AttentionRecord
from attnviz.models.registry import EMBEDDED, SourceSpec, embedded_spec
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
        spec_b = _model_b(settings, source_a)
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


def _spec(choice: str, settings: Settings, seed: int | None = None) -> SourceSpec:
    """The spec of a sidebar model chosen as B: the embedded model at A's sizes (under ``seed``), or another."""
    if choice == EMBEDDED:
        return embedded_spec(settings.spec.device, settings.spec.config, seed, dtype=settings.spec.placement.dtype)
    trusted = choice in hosted.operator_models()
    placement = (
        settings.spec.placement if settings.spec.source != EMBEDDED else Placement(settings.spec.placement.dtype)
    )
    return SourceSpec(choice, settings.spec.device, allow_pickle=ALLOW_PICKLE and trusted, placement=placement)


def shared_tokenizer_models(settings: Settings, source_a: AttentionSource) -> list[str]:
    """The sidebar's models that read the sidebar's text into the same tokens as A, in the sidebar's order: the
    ones a comparison of two models can pair with A. Each is asked as a source (loaded once per process, then
    shared); one that cannot load is left out, and so is A's own model (the same weights on the same text)."""
    read_a = source_a.encode(settings.text, settings.max_tokens)
    shared = []
    with st.spinner(t("compare.checking_models")):
        for choice in hosted.model_options():
            if choice == "path":
                continue
            spec = _spec(choice, settings)
            if choice != EMBEDDED and spec == settings.spec:
                continue
            try:
                source = load_source(spec)
            except ModelUnavailableError:
                continue
            if compare.same_tokens(read_a, source.encode(settings.text, settings.max_tokens)):
                shared.append(choice)
    return shared


def _model_b(settings: Settings, source_a: AttentionSource) -> SourceSpec:
    """Model B as chosen among the models that share A's tokenizer (said before the choice when none does): the
    embedded model at the sidebar's sizes under another seed, a bundled or operator's model, or a folder."""
    offered = shared_tokenizer_models(settings, source_a)
    if offered:
        st.caption(t("compare.shared_models"))
    else:
        st.info(t("compare.no_shared_model", model=markdown_text(source_a.name)))
    if "path" in hosted.model_options():  # any folder or hub id: asked once typed
        offered.append("path")
    if not offered:
        st.stop()
    valid_choice("compare_model_b", offered, offered[0])
    choice = st.selectbox(t("compare.model_b"), offered, key="compare_model_b", format_func=hosted.model_label)
    if choice == EMBEDDED:  # the same tokenizer by construction
        valid_choice("compare_seed_b", range(limits.SEED.low, limits.SEED.high + 1), 1)
        seed_b = st.number_input(t("compare.seed_b"), limits.SEED.low, limits.SEED.high, key="compare_seed_b", step=1)
        return _spec(EMBEDDED, settings, int(seed_b))
    if choice != "path":
        return _spec(choice, settings)
    name = st.text_input(t("compare.model_path_b"), key="compare_model_path_b")
    if not name.strip():
        st.info(t("compare.type_path_b"))
        st.stop()
    placement = (
        settings.spec.placement if settings.spec.source != EMBEDDED else Placement(settings.spec.placement.dtype)
    )
    return SourceSpec(name.strip(), settings.spec.device, allow_pickle=ALLOW_PICKLE, placement=placement)


def run_comparison(key: tuple, record_a: AttentionRecord, record_b: AttentionRecord) -> compare.Comparison:
    """The comparison of A and B, from the shared cache or computed under a progress bar (layers done, time
    left). Before work longer than :data:`~attnviz.labs.compare.CONFIRM_SECONDS`, its time as measured on this
    machine now (:func:`~attnviz.labs.compare.measured_seconds`, kept for this session) is said and a button
    starts it; both are gone once it runs."""
    alignment = compare.align_records(record_a, record_b)
    if ("compare", key) not in result_cache():
        estimates = st.session_state.setdefault("compare_estimates", {})
        if key not in estimates:
            with st.spinner(t("compare.measuring")):
                estimates[key] = compare.measured_seconds(record_a, record_b, alignment)
        seconds = estimates[key]
        if seconds > compare.CONFIRM_SECONDS:
            slot = st.empty()
            with slot.container():
                queries = compare.jsd_queries(record_a.n_layer, record_a.n_head, max(record_a.k_len, record_b.k_len))
                st.warning(t("compare.slow", queries=min(queries, len(alignment)), time=duration_text(seconds)))
                clicked = st.button(t("compare.run", time=duration_text(seconds)), key="compare_run")
            if not clicked:
                st.stop()
            slot.empty()
    return cached_job(
        "compare",
        key,
        lambda progress: compare.compare_records(record_a, record_b, progress=progress, alignment=alignment),
        t("compare.comparing"),
        need=compare.comparison_need(record_a, record_b),
    )


def _picked_row(event, table) -> tuple[int, int] | None:
    """The (layer, head) of the table's row a click selected, or None."""
    try:
        selection = event["selection"] if isinstance(event, dict) else event.selection
        row = table.iloc[int(selection["rows"][0])]
        return int(row["layer"]), int(row["head"])
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return None


def choose_head(comparison: compare.Comparison, largest, key: tuple) -> tuple[int, int]:
    """The head shown in A and B: the one a click on the JSD grid or on a row of the largest changes (``largest``,
    the table as drawn) picked last, else the one chosen in the list; the head whose pattern moved most whenever
    the comparison (``key``) is a new one. The list runs from the largest JSD down."""
    order = comparison.largest(n=len(comparison.jsd))
    jsd = {f"{int(row.layer)}:{int(row.head)}": row.jsd for row in order.itertuples()}
    options = list(jsd)
    moved = comparison.most_moved()
    default = f"{moved[0]}:{moved[1]}" if moved else options[0]
    if st.session_state.get("compare_head_of") != key:  # another comparison: its own most moved head
        st.session_state["compare_head_of"] = key
        st.session_state["compare_head"] = default
    valid_choice("compare_head", options, default)
    picks = (
        ("compare_jsd", selected_head(st.session_state.get("compare_jsd"))),
        ("compare_largest", _picked_row(st.session_state.get("compare_largest"), largest)),
    )
    for source, picked in picks:
        if picked is not None and picked != st.session_state.get(f"{source}_opened"):  # a new click, once
            st.session_state[f"{source}_opened"] = picked
            if f"{picked[0]}:{picked[1]}" in jsd:
                st.session_state["compare_head"] = f"{picked[0]}:{picked[1]}"

    def label(option: str) -> str:
        layer, head = option.split(":")
        return t("compare.head_option", layer=layer, head=head, jsd=jsd_text(jsd[option]))

    choice = st.selectbox(t("compare.head"), options, key="compare_head", format_func=label)
    layer, head = choice.split(":")
    return int(layer), int(head)


def jsd_text(value: float) -> str:
    """A JSD as a reader sees it: 3 significant digits (0 at float rounding), "—" where no query was compared."""
    value = compare.rounded(float(value))
    return "—" if value != value else f"{value:g}"

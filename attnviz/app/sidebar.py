"""The shared sidebar: language, text, model, device and the token limit, drawn once per run in app.py's frame."""

from __future__ import annotations

import sys
from collections.abc import Mapping

import streamlit as st

from attnviz import settings
from attnviz.app import hosted
from attnviz.app.hosted import model_label, model_options
from attnviz.app.links import link_settings
from attnviz.app.state import Settings, init_state, pin_choices
from attnviz.app.widgets import show_error
from attnviz.core.devices import (
    DEVICE_CHOICES,
    DEVICE_MAP_CHOICES,
    DTYPE_CHOICES,
    Placement,
    available_devices,
    parse_max_memory,
    resolve_device,
)
from attnviz.i18n.catalogue import LANGUAGES
from attnviz.i18n.message import msg
from attnviz.i18n.translate import language_from_locale, set_language, t
from attnviz.models import registry
from attnviz.models.registry import EMBEDDED, SourceSpec

# Pickled checkpoints load only when the server was started with this flag:
#   streamlit run app.py -- --allow-pickle
ALLOW_PICKLE = "--allow-pickle" in sys.argv[1:]

EXAMPLE_KEYS = dict(zip(settings.EXAMPLES, ("en_cat", "en_pronouns", "zh_cat", "zh_attention", "mixed"), strict=True))
CUSTOM_TEXT = "custom"  # the Example box's entry for a text that is none of the examples (typed or from a link)


def example_name(name: str) -> str:
    """An example's name in the session's language (the option value stays the English name)."""
    if name == CUSTOM_TEXT:
        return t("examples.custom")
    return t(f"examples.{EXAMPLE_KEYS[name]}")


def example_for(text: str, chosen: str) -> str:
    """What the Example box says for ``text``: the chosen example while the text is still its text, else the example
    whose text it is (a link to one), else :data:`CUSTOM_TEXT`."""
    if settings.EXAMPLES.get(chosen) == text:
        return chosen
    return next((name for name, example in settings.EXAMPLES.items() if example == text), CUSTOM_TEXT)


def _use_example() -> None:
    """Put the example in the text box; a Chinese example switches a bundled model that reads almost no Chinese
    (MiniLM) to one that reads it (SmolLM2), as the registry says."""
    if st.session_state.example == CUSTOM_TEXT:  # nothing to put there: the text stays the reader's
        return
    st.session_state.text = settings.EXAMPLES[st.session_state.example]
    if st.session_state.example in settings.CHINESE_EXAMPLES and registry.misreads_chinese(
        st.session_state.get("model")
    ):
        st.session_state.model = registry.chinese_reader()
        st.session_state.example_note = msg("sidebar.chinese_switch")


def _bounded_input(container, label: str, bound: settings.Bound, key: str, **kwargs) -> None:
    container.number_input(label, min_value=bound.low, max_value=bound.high, key=key, **kwargs)


def choose_language() -> str:
    """The session's language: a link's ``?lang=`` first, else the browser's (``st.context.locale``), else English;
    then the sidebar's switch leads. Set for the rest of the run (:func:`attnviz.i18n.translate.set_language`) and kept in
    the link."""
    if "lang" not in st.session_state:
        asked = st.query_params.get("lang")
        st.session_state.lang = asked if asked in LANGUAGES else language_from_locale(st.context.locale)
    with st.sidebar:
        st.selectbox(
            t("sidebar.language"), list(LANGUAGES), key="lang", format_func=LANGUAGES.get, on_change=pin_choices
        )
    set_language(st.session_state.lang)
    if st.query_params.get("lang") != st.session_state.lang:
        st.query_params["lang"] = st.session_state.lang
    return st.session_state.lang


def embedded_spec(values: Mapping, device: str) -> SourceSpec:
    """The embedded model's spec from the sidebar's values (the session's, or :data:`DEFAULTS` for a new one)."""
    return registry.embedded_spec(
        device,
        dtype=str(values.get("dtype", "auto")),
        d_model=int(values["d_model"]),
        n_head=int(values["n_head"]),
        n_kv_head=int(values["n_kv_head"]) or None,
        n_layer=int(values["n_layer"]),
        seed=int(values["seed"]),
        causal=bool(values["causal"]),
    )


def device_options() -> tuple[str, ...]:
    """The devices the sidebar offers: auto, the kinds, and each GPU past the first by its index."""
    extra = [d for d in available_devices() if d.startswith("cuda:") and d != "cuda:0"]
    return (*DEVICE_CHOICES, *extra)


def _device_and_placement() -> tuple[str, Placement]:
    """The Device section: device and dtype side by side, and (not on a hosted server, whose operator places
    models) a device map with memory caps and an offload folder for a model larger than one device."""
    st.header(t("sidebar.device_header"))
    cols = st.columns(2)
    cols[0].selectbox(t("sidebar.device"), device_options(), key="device")
    cols[1].selectbox(t("sidebar.dtype"), DTYPE_CHOICES, key="dtype", help=t("sidebar.dtype_help"))
    try:
        device = resolve_device(st.session_state.device)
    except ValueError as err:
        show_error(err)
        device = resolve_device("auto")
    placement = Placement(st.session_state.dtype)
    if not hosted.is_hosted() and st.session_state.model != EMBEDDED:
        with st.expander(t("sidebar.device_map_header"), expanded=st.session_state.device_map != "none"):
            st.selectbox(t("sidebar.device_map"), ("none", *DEVICE_MAP_CHOICES), key="device_map")
            st.text_input(t("sidebar.max_memory"), key="max_memory", placeholder="0=20GiB,1=20GiB,cpu=64GiB")
            st.text_input(t("sidebar.offload_folder"), key="offload_folder")
        if st.session_state.device_map != "none":
            try:
                caps = st.session_state.max_memory.strip()
                placement = Placement(
                    st.session_state.dtype,
                    st.session_state.device_map,
                    parse_max_memory(caps) if caps else (),
                    st.session_state.offload_folder.strip() or None,
                )
            except ValueError as err:
                show_error(err)
    st.caption(t("sidebar.running_on", device=device))
    return device, placement


def sidebar() -> Settings:
    """Draw the shared sidebar and return the settings it holds."""
    init_state()
    choose_language()
    link_settings()
    with st.sidebar:
        st.header(t("sidebar.text_header"))
        st.session_state.example = example_for(st.session_state.text, st.session_state.example)
        options = [*settings.EXAMPLES, CUSTOM_TEXT]
        st.selectbox(
            t("sidebar.example"),
            options,
            key="example",
            on_change=_use_example,
            format_func={name: example_name(name) for name in options}.get,  # this run's language
        )
        st.text_area(t("sidebar.text"), key="text", height=110)
        _bounded_input(
            st, t("sidebar.max_tokens"), settings.MAX_TOKENS, "max_tokens", step=16, help=t("sidebar.max_tokens_help")
        )

        st.header(t("sidebar.model_header"))
        offered = model_options()
        if not hosted.allowed_model(st.session_state.model, offered):  # a stale value, or "path" on a hosted server
            st.session_state.model, st.session_state.model_refused = EMBEDDED, True
        if st.session_state.pop("model_refused", False):
            show_error(msg("hosted.model_refused"))
        st.selectbox(
            t("sidebar.model"), list(offered), key="model", format_func={m: model_label(m) for m in offered}.get
        )
        if st.session_state.model == "path":
            st.text_input(t("sidebar.model_path"), key="model_path", placeholder=t("sidebar.model_path_placeholder"))
        with st.expander(t("sidebar.embedded"), expanded=st.session_state.model == EMBEDDED):
            st.caption(t("sidebar.embedded_caption"))
            cols = st.columns(2)
            _bounded_input(cols[0], "d_model", settings.D_MODEL, "d_model", step=2)
            _bounded_input(cols[1], "n_head", settings.N_HEAD, "n_head")
            _bounded_input(cols[0], "n_kv_head", settings.N_KV_HEAD, "n_kv_head", help=t("sidebar.n_kv_head_help"))
            _bounded_input(cols[1], "n_layer", settings.N_LAYER, "n_layer")
            _bounded_input(cols[0], "seed", settings.SEED, "seed")
            cols[1].checkbox(t("sidebar.causal"), key="causal", help=t("sidebar.causal_help"))

        device, placement = _device_and_placement()

        spec, error = None, None
        source = st.session_state.model
        try:
            if source == EMBEDDED:
                spec = embedded_spec(st.session_state, device)
            elif source == "path":
                path = st.session_state.model_path.strip()
                if not path:
                    raise ValueError(msg("sidebar.type_a_path"))
                spec = SourceSpec(path, device, allow_pickle=ALLOW_PICKLE, placement=placement)
            elif source in hosted.operator_models():
                spec = SourceSpec(source, device, allow_pickle=ALLOW_PICKLE, placement=placement)
            else:
                spec = SourceSpec(source, device, placement=placement)
        except ValueError as err:
            error = msg("sidebar.invalid", error=err)
            show_error(error)
    return Settings(text=st.session_state.text, max_tokens=int(st.session_state.max_tokens), spec=spec, error=error)

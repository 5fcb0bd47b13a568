"""Streamlit glue: the shared sidebar, cached sources and records, the head view, friendly errors.

This is the one module of the library that imports Streamlit. Pages call
:func:`current_source` / :func:`current_record` and get a source or a record
(or a message has already been shown and they stop), so no page deals with
models, caching or bad input itself.

Caching, deliberately:
- sources (models) live in ``st.cache_resource``: loaded once per process, shared read-only;
- records, batches, generations and parity results live in one :class:`~attnviz.cache.BoundedCache`
  per process, handed out by reference (no copy per rerun) and bounded in bytes
  (``ATTNVIZ_CACHE_MB``, default 2,048 MB; at most 32 entries);
- figures derived from a record are cached with ``st.cache_data``, keyed by what
  produced the record plus the figure's own options.
"""

from __future__ import annotations

import copy
import os
import sys
import threading
import time
from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
import torch
from streamlit.errors import StreamlitAPIException
from streamlit.runtime.pages_manager import PagesManager

from attnviz import hosted, settings, training
from attnviz.bundled import BUNDLED
from attnviz.cache import BoundedCache
from attnviz.capture import predicted_nbytes
from attnviz.devices import DEVICE_CHOICES, resolve_device
from attnviz.embedded import EmbeddedConfig
from attnviz.figures import (
    make_head_grid_figure,
    make_head_heatmap_figure,
    make_head_stats_figure,
    make_pooled_head_figure,
    make_row_figure,
)
from attnviz.gqa_convert import gqa_whatif
from attnviz.i18n import LANGUAGES, language, language_from_locale, set_language, t
from attnviz.kv_figures import make_decode_figure, make_whatif_figure
from attnviz.kv_measure import decode_timing
from attnviz.kv_memory import ConfigError, KVConfig, config_from_dict, kv_config_of, load_config, parse_config_json
from attnviz.kv_presets import PRESETS
from attnviz.kv_report import KV_MEASURE_LENGTHS, MEASURED_HEADERS, measured_vs_estimated, whatif_summary
from attnviz.mask_doctor import parse_lengths
from attnviz.mask_io import MASK_SUFFIXES, MaskFileError, infer_convention, read_mask_bytes
from attnviz.mask_lab import KINDS as MASK_KINDS
from attnviz.mask_lab import LabMask, built_mask, custom_mask, kind_label
from attnviz.record import LABEL_CHARS, AttentionRecord, Head, cut_tokens, head_label
from attnviz.source import AttentionSource, ModelUnavailableError
from attnviz.sources import CHOICES, EMBEDDED, SourceSpec, open_source, preparation_note, prepare_source
from attnviz.token_display import markdown_text, plain_text, typed_special
from attnviz.training import SCALE_KINDS, RunResult, TrainingConfig
from attnviz.training_figures import make_training_figure

# full-resolution windows under a pooled view, tokens a side (512 x 512 float32 weights is 1 MiB sent)
WINDOW_SIDES = (128, 256, 512)
# Pickled checkpoints load only when the server was started with this flag:
#   streamlit run app.py -- --allow-pickle
ALLOW_PICKLE = "--allow-pickle" in sys.argv[1:]

DEFAULTS = {
    "text": settings.DEFAULT_TEXT,
    "example": settings.DEFAULT_EXAMPLE,
    "device": "auto",
    "model": EMBEDDED,
    "model_path": "",
    "max_tokens": settings.MAX_TOKENS.default,
    "d_model": settings.D_MODEL.default,
    "n_head": settings.N_HEAD.default,
    "n_kv_head": settings.N_KV_HEAD.default,
    "n_layer": settings.N_LAYER.default,
    "seed": settings.SEED.default,
    "causal": False,
}


@dataclass(frozen=True)
class Settings:
    """What the sidebar asks for; ``error`` says why the model settings are invalid."""

    text: str
    max_tokens: int
    spec: SourceSpec | None
    error: str | None = None

    def key(self, max_tokens: int | None = None) -> tuple:
        """What determines a record: the source, the text and the token limit."""
        return (self.spec, self.text, self.max_tokens if max_tokens is None else max_tokens)


PAGES = {  # file name in pages/ (and its key in the catalogue's [nav]) -> icon, in menu order
    "overview": "🏠",
    "heads": "🧠",
    "tokens": "🔤",
    "head_roles": "🧩",
    "parity": "⚖️",
    "generation": "✍️",
    "padding": "🧱",
    "masks": "🎭",
    "kv_cache": "🗄️",
    "scaling": "📐",
    "training": "📉",
    "walkthrough": "🪜",
    "cost": "⏱️",
}


def pages() -> list[st.Page]:
    """Every page of the app, in menu order, titled in the session's language."""
    return [
        st.Page(f"pages/{name}.py", title=t(f"nav.{name}"), icon=icon, default=name == "overview")
        for name, icon in PAGES.items()
    ]


def leave_legacy_multipage_mode() -> None:
    """Leave Streamlit's legacy ``pages/`` mode before any widget is drawn.

    With a ``pages/`` folder beside app.py, a fresh server starts in Streamlit's
    v1 multipage mode, and stays there until ``st.navigation`` first runs in the
    process. The first run of the first session therefore executes app.py (or,
    for a shared link, the page file) *as a v1 page*: its widgets get ids scoped
    to that page, the browser drops their state at the first page switch, and
    the sidebar comes back at the widgets' minimums. So the script that runs in
    v1 mode draws nothing: ``st.navigation`` switches the process to v2 and
    resolves the page the visitor asked for, and ``st.switch_page`` reruns on it
    through app.py's frame.
    """
    if getattr(PagesManager, "uses_pages_directory", False):
        # the link's query parameters (?lang=, ?layer=) go along: switch_page would clear them
        st.switch_page(st.navigation(pages(), position="hidden"), query_params=st.query_params.to_dict())


def frame_settings() -> Settings:
    """The sidebar's settings, as app.py's frame stored them for this run.

    A first visit straight to a page's URL on a fresh server runs that page file
    alone (legacy mode, see :func:`leave_legacy_multipage_mode`); the rerun goes
    through app.py, sidebar included.
    """
    leave_legacy_multipage_mode()
    return st.session_state["settings"]


def init_state() -> None:
    for key, value in DEFAULTS.items():
        if key not in st.session_state:
            st.session_state[key] = value


EXAMPLE_KEYS = dict(zip(settings.EXAMPLES, ("en_cat", "en_pronouns", "zh_cat", "zh_attention", "mixed"), strict=True))


def example_name(name: str) -> str:
    """An example's name in the session's language (the option value stays the English name)."""
    return t(f"examples.{EXAMPLE_KEYS[name]}")


def _use_example() -> None:
    """Put the example in the text box; a Chinese example switches MiniLM, which reads almost no Chinese, to SmolLM2."""
    st.session_state.text = settings.EXAMPLES[st.session_state.example]
    if st.session_state.example in settings.CHINESE_EXAMPLES and st.session_state.get("model") == "minilm":
        st.session_state.model = settings.CHINESE_MODEL
        st.session_state.example_note = t("sidebar.chinese_switch")


def _bounded_input(container, label: str, bound: settings.Bound, key: str, **kwargs) -> None:
    container.number_input(label, min_value=bound.low, max_value=bound.high, key=key, **kwargs)


def _pin_choices() -> None:
    """Keep every choice across a language switch, and show it in the new language.

    A browser sends a choice back as the label it showed ("only heads flagged sink"); after the switch, the
    options are labelled in the other language, the old label matches none, and Streamlit would reset the
    choice, while the browser would go on showing the old label. This callback runs before the page, while the
    last run's labels still decode the browser's state: each value is read there and written back, which keeps
    it and makes Streamlit send the browser the value again, labelled in the new language.
    """
    for key in list(st.session_state.keys()):
        if key == "lang":
            continue
        try:
            value = st.session_state[key]
        except (KeyError, AttributeError):  # nothing to decode it with yet (a widget not drawn last run)
            continue
        # a choice is a str or a number (a list of them for a multiselect); a button's bool, an upload, a chart's
        # selection need no label and may not be assigned
        plain = (str, int, float)
        if (isinstance(value, plain) and not isinstance(value, bool)) or (
            isinstance(value, list) and value and all(isinstance(v, plain) and not isinstance(v, bool) for v in value)
        ):
            try:
                st.session_state[key] = value
            except StreamlitAPIException:
                continue


def choose_language() -> str:
    """The session's language: a link's ``?lang=`` first, else the browser's (``st.context.locale``), else English;
    then the sidebar's switch leads. Set for the rest of the run (:func:`attnviz.i18n.set_language`) and kept in
    the link."""
    if "lang" not in st.session_state:
        asked = st.query_params.get("lang")
        st.session_state.lang = asked if asked in LANGUAGES else language_from_locale(st.context.locale)
    with st.sidebar:
        st.selectbox(
            t("sidebar.language"), list(LANGUAGES), key="lang", format_func=LANGUAGES.get, on_change=_pin_choices
        )
    set_language(st.session_state.lang)
    if st.query_params.get("lang") != st.session_state.lang:
        st.query_params["lang"] = st.session_state.lang
    return st.session_state.lang


def sidebar() -> Settings:
    """Draw the shared sidebar and return the settings it holds."""
    init_state()
    choose_language()
    link_settings()
    with st.sidebar:
        st.header(t("sidebar.text_header"))
        st.selectbox(
            t("sidebar.example"),
            list(settings.EXAMPLES),
            key="example",
            on_change=_use_example,
            format_func={name: example_name(name) for name in settings.EXAMPLES}.get,  # this run's language
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
            st.error(t("hosted.model_refused"))
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

        st.header(t("sidebar.device_header"))
        st.selectbox(t("sidebar.device"), DEVICE_CHOICES, key="device")
        try:
            device = resolve_device(st.session_state.device)
            st.caption(t("sidebar.running_on", device=device))
        except ValueError as err:
            st.error(markdown_text(str(err)))
            device = resolve_device("auto")

        spec, error = None, None
        source = st.session_state.model
        try:
            if source == EMBEDDED:
                config = EmbeddedConfig(
                    d_model=int(st.session_state.d_model),
                    n_head=int(st.session_state.n_head),
                    n_kv_head=int(st.session_state.n_kv_head) or None,
                    n_layer=int(st.session_state.n_layer),
                    seed=int(st.session_state.seed),
                    causal=bool(st.session_state.causal),
                )
                spec = SourceSpec(EMBEDDED, device, config)
            elif source == "path":
                path = st.session_state.model_path.strip()
                if not path:
                    raise ValueError(t("sidebar.type_a_path"))
                spec = SourceSpec(path, device, allow_pickle=ALLOW_PICKLE)
            elif source in hosted.operator_models():
                spec = SourceSpec(source, device, allow_pickle=ALLOW_PICKLE)
            else:
                spec = SourceSpec(source, device)
        except ValueError as err:
            error = t("sidebar.invalid", error=err)
            st.error(error)
    return Settings(text=st.session_state.text, max_tokens=int(st.session_state.max_tokens), spec=spec, error=error)


_LOAD_LOCK = threading.Lock()


@st.cache_resource(max_entries=8, show_spinner=False)
def load_source(spec: SourceSpec) -> AttentionSource:
    """One model per spec, loaded once per process and shared read-only by every session.

    Streamlit computes each spec once, but two specs (MiniLM and SmolLM2 asked for at the same moment) load in two
    threads at once, and transformers' first import is not thread-safe (``cannot import name 'AutoConfig'``): loads
    take turns. Eight entries: five people on the embedded model's variants, MiniLM and SmolLM2 no longer push each
    other out and reload. Each load says so on the server's stderr (``attnviz: loaded … in 1.2 s``), so an operator,
    and the concurrency test, can count them.
    """
    with _LOAD_LOCK:
        start = time.perf_counter()
        source = open_source(spec)
    print(f"attnviz: loaded {spec.title} [{source.name}] in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return source


@st.cache_resource(show_spinner=False)
def result_cache() -> BoundedCache:
    """The process's one cache of records and other large results (see the module docstring)."""
    mb = int(os.environ.get(settings.CACHE_MB_ENV, settings.CACHE_MB_DEFAULT))
    return BoundedCache(max_bytes=mb * 2**20, max_entries=settings.CACHE_ENTRIES)


def cached(kind: str, key: tuple, compute, spinner: str):
    """A large result by (kind, key), computed once per process (while a spinner says what is happening)."""
    cache = result_cache()
    if (kind, key) in cache:
        return cache.get_or_compute((kind, key), compute)
    with st.spinner(spinner):
        return cache.get_or_compute((kind, key), compute)


def source_for(spec: SourceSpec) -> AttentionSource | None:
    """The loaded model, with progress while a one-time step runs; None after showing why it cannot load."""
    try:
        note = preparation_note(spec)
        if note:
            with st.status(note, expanded=True) as status:
                bar = st.progress(0.0, text=t("sources.starting"))
                prepare_source(spec, progress=lambda fraction, message: bar.progress(fraction, text=message))
                status.update(label=t("sources.ready", title=spec.title), state="complete", expanded=False)
        with st.spinner(t("sources.loading", title=spec.title)):
            return load_source(spec)
    except ModelUnavailableError as err:
        st.error(markdown_text(str(err)))  # the message quotes the user's path: data, not Markdown
        return None


def current_source(settings_: Settings) -> AttentionSource | None:
    """The sidebar's model, loaded; None after telling the user why not."""
    if settings_.error or settings_.spec is None:
        st.error(settings_.error or t("sources.choose_model"))
        return None
    return source_for(settings_.spec)


def require_source(settings_: Settings) -> AttentionSource:
    """The sidebar's model, loaded; otherwise the page stops after saying why."""
    source = current_source(settings_)
    if source is None:
        st.stop()
    return source


def require_text(settings_: Settings, hint: str | None = None) -> None:
    """Stop the page with ``hint`` (by default: type some text) while the sidebar's text is empty."""
    if not settings_.text.strip():
        st.info(hint or t("views.type_some_text"))
        st.stop()


def fits_the_cache(source: AttentionSource, settings_: Settings) -> bool:
    """Whether the capture's record fits this server's result cache; says why not, and what to do, when not.

    A record over the bound could not be kept, so every rerun would capture it again.
    """
    n_tokens = len(source.encode(settings_.text, settings_.max_tokens).tokens)
    dims = (source.n_layer, source.n_head, source.n_kv_head, source.head_dim)
    need, bound = predicted_nbytes(*dims, n_tokens), result_cache().max_bytes
    if need <= bound:
        return True
    fit = max((n for n in range(16, n_tokens, 16) if predicted_nbytes(*dims, n) <= bound), default=0)
    st.error(
        t(
            "ui_capture.too_large",
            n_tokens=n_tokens,
            need_mb=need / 2**20,
            bound_mb=bound / 2**20,
            env=settings.CACHE_MB_ENV,
            fit=fit,
        )
    )
    return False


def record_for(source: AttentionSource, settings_: Settings) -> AttentionRecord:
    """The capture of the sidebar's text, from the shared cache."""
    return cached(
        "record",
        settings_.key(),
        lambda: source.run(settings_.text, settings_.max_tokens),
        t("sources.capturing"),
    )


def current_record(settings_: Settings) -> AttentionRecord | None:
    """The record for the sidebar's settings, or None after telling the user why not."""
    source = current_source(settings_)
    if source is None:
        return None
    if not settings_.text.strip():
        st.info(t("sources.type_text"))
        return None
    try:
        if not fits_the_cache(source, settings_) or not within_budget(settings_, source):
            return None
        record = record_for(source, settings_)
    except ModelUnavailableError as err:
        st.error(markdown_text(str(err)))
        return None
    if not record.tokens:
        st.info(t("sources.no_tokens"))
        return None
    if len(record.tokens) == 1:
        st.info(t("sources.single_token"))
        return None
    note = st.session_state.pop("example_note", None)
    if note:
        st.info(note)
    coverage_warning(record)
    typed = typed_special(record.tokens)
    if typed:
        st.info(t("hostile.typed_special", tokens=", ".join(markdown_text(text) for text in typed)))
    if record.truncated:
        why = (
            t("sources.raise_max_tokens")
            if len(record.tokens) >= settings_.max_tokens
            else t("sources.model_limit", n=len(record.tokens))
        )
        st.warning(t("sources.truncated", n_input=record.n_input_tokens, n=len(record.tokens), why=why))
    return record


LONG_TOKENS_LISTED = 20  # cut tokens listed whole under the chart


def coverage_warning(record: AttentionRecord) -> None:
    """Warn when the model's tokenizer read much of the text as its unknown token, and name a model that reads it."""
    real = [token for token in record.tokens if not token.special and not token.pad]
    unknown = sum(token.unknown for token in real)
    if real and unknown / len(real) >= settings.UNKNOWN_SHARE_WARNING:
        st.warning(t("views.unknown_tokens", model=markdown_text(record.model_name), unknown=unknown, n=len(real)))
    cut = cut_tokens(record.tokens)
    if cut:
        if len(cut) > 1:
            st.caption(t("views.long_tokens_cut", n=len(cut), chars=LABEL_CHARS))
        else:
            st.caption(t("views.long_token_cut", chars=LABEL_CHARS))
        with st.expander(t("views.long_tokens")):
            for i, text in cut[:LONG_TOKENS_LISTED]:
                st.text(f"{i}: {text}")
            if len(cut) > LONG_TOKENS_LISTED:
                st.caption(t("views.and_more", n=len(cut) - LONG_TOKENS_LISTED))


def layer_head_picker(n_layer: int, n_head: int, key: str, with_mean: bool = True) -> tuple[int, Head]:
    """Two selectboxes side by side: a layer and a head (or "mean")."""
    cols = st.columns(2)
    heads = [*range(n_head), "mean"] if with_mean else list(range(n_head))
    valid_choice(f"{key}_layer", range(n_layer), 0)  # L29 of SmolLM2 is no layer of MiniLM's six
    valid_choice(f"{key}_head", heads, 0)
    # the labels are made in this run, in the session's language; format_func only looks them up
    names = {h: head_label(h) for h in heads}
    layer = cols[0].selectbox(t("views.layer"), range(n_layer), key=f"{key}_layer", format_func=lambda i: f"L{i}")
    head = cols[1].selectbox(t("views.head"), heads, key=f"{key}_head", format_func=names.get)
    return layer, head


def plotly(fig: go.Figure, key: str, *, tensors=None, **kwargs):
    """Render a figure at full width with a stable key, an Export menu under it; returns the selection event when
    asked for one.

    The modebar's camera saves an SVG at the figure's size, named after ``key`` (the menu switches it to PNG);
    the menu also offers the figure as offline HTML and, given ``tensors`` (an
    :class:`attnviz.exports.TensorExport`), the tensors it draws. Chart and menu share a container, so a
    placeholder (``st.empty``) holding the chart holds both.
    """
    from attnviz.exports import IMAGE_FORMATS, chart_config

    fmt = st.session_state.get(f"{key}_image_format")
    config = chart_config(fig, key, fmt if fmt in IMAGE_FORMATS else "svg")
    with st.container():
        event = st.plotly_chart(fig, key=key, width="stretch", config=config, **kwargs)
        export_menu(key, fig=fig, tensors=tensors)
    return event


def grid_figure(
    record_key: tuple, gamma: float, _record: AttentionRecord, show: str = "all heads", compact: bool = False
) -> go.Figure:
    """The layer x head grid of a record (keyed by what produced the record), flags on hover.

    ``show`` is one of :func:`grid_show_options` (dim all but one flag, or sort each
    layer's heads by a statistic); ``compact`` fits the grid in about 900 px.
    """
    return _grid_figure(record_key, gamma, _record, show, compact, language())


@st.cache_data(max_entries=32, show_spinner=False)
def _grid_figure(
    record_key: tuple, gamma: float, _record: AttentionRecord, show: str, compact: bool, lang: str
) -> go.Figure:
    """:func:`grid_figure`, cached per language too: the figure's hover words are the session's language."""
    from attnviz.figures import grid_view

    view = grid_view(_record.statistics, _record.n_layer, _record.n_head, show)
    return make_head_grid_figure(
        _record.pooled_grid("max"), mean=_record.mean_grid(), gamma=gamma, max_height=900 if compact else None, **view
    )


def stats_figure(record_key: tuple, metric: str, _record: AttentionRecord) -> go.Figure:
    return _stats_figure(record_key, metric, _record, language())


@st.cache_data(max_entries=32, show_spinner=False)
def _stats_figure(record_key: tuple, metric: str, _record: AttentionRecord, lang: str) -> go.Figure:
    """:func:`stats_figure`, cached per language (its titles are the session's language)."""
    return make_head_stats_figure(_record.statistics, metric)


def resolution_note(record: AttentionRecord) -> str:
    """What the large view shows, in words."""
    if record.full_view:
        return t("views.full_resolution", q_len=record.q_len, k_len=record.k_len)
    b = record.bin_size
    return t("views.pooled", q_len=record.q_len, q_cells=-(-record.q_len // b), k_cells=-(-record.k_len // b), b=b)


def head_view(
    record: AttentionRecord,
    layer: int,
    head: Head,
    key: str,
    *,
    gamma: float = 1.0,
    labels: list[str] | None = None,
    title: str | None = None,
) -> None:
    """One head drawn large: whole at full resolution when it fits, else pooled with a zoom to full resolution."""
    whole = None if labels else record.labels(full=True)  # whole tokens on hover where the axis labels are cut
    labels = labels or record.labels()
    title = title or f"L{layer} {head_label(head)}"
    if record.full_view:
        weights = record.weights(layer, head)
        fig = make_head_heatmap_figure(
            weights, labels, labels, title=title, gamma=gamma, mask=record.mask(layer), q_hover=whole, k_hover=whole
        )
        plotly(fig, key=f"{key}_large")
        st.caption(resolution_note(record))
        return
    st.caption(resolution_note(record))
    kinds = {"max": t("views.pool_max"), "mean": t("views.pool_mean")}
    kind = st.radio(t("views.pooling"), list(kinds), key=f"{key}_pool", horizontal=True, format_func=kinds.get)
    pooled = record.pooled(layer, head, kind)
    if kind == "max":
        pooled_title = t("views.pooled_title_max", title=title)
    else:
        pooled_title = t("views.pooled_title_mean", title=title)
    fig = make_pooled_head_figure(
        pooled, record.bin_size, record.q_len, record.k_len, title=pooled_title, gamma=gamma, kind=kind
    )
    event = plotly(fig, key=f"{key}_pooled", on_select="rerun", selection_mode=("box",))
    box = _selected_box(event)
    if box is not None and box != st.session_state.get(f"{key}_box"):  # a new selection moves the window once;
        st.session_state[f"{key}_box"] = box  # the inputs stay editable while it stays selected
        st.session_state[f"{key}_q0"] = min(box[0], record.q_len - 1)
        st.session_state[f"{key}_k0"] = min(box[1], record.k_len - 1)
    if f"{key}_side" not in st.session_state:
        st.session_state[f"{key}_side"] = WINDOW_SIDES[1]
    cols = st.columns(3)
    side = int(cols[2].select_slider(t("views.window"), WINDOW_SIDES, key=f"{key}_side", help=t("views.window_help")))
    forget = {
        "on_change": st.session_state.pop,
        "args": (f"{key}_box", None),
    }  # typing frees the box to be chosen again
    q0 = cols[0].number_input(
        t("views.queries_from"), 0, max(0, record.q_len - 1), key=f"{key}_q0", step=side // 2, **forget
    )
    k0 = cols[1].number_input(
        t("views.keys_from"), 0, max(0, record.k_len - 1), key=f"{key}_k0", step=side // 2, **forget
    )
    rows = (int(q0), min(record.q_len, int(q0) + side))
    cols_ = (int(k0), min(record.k_len, int(k0) + side))
    window = record.weights(layer, head, rows, cols_)
    mask = record.mask(layer, rows, cols_)
    fig = make_head_heatmap_figure(
        window,
        labels[rows[0] : rows[1]],
        labels[cols_[0] : cols_[1]],
        title=t("views.window_title", title=title, q0=rows[0], q1=rows[1] - 1, k0=cols_[0], k1=cols_[1] - 1),
        gamma=gamma,
        mask=mask,
        q_hover=whole and whole[rows[0] : rows[1]],
        k_hover=whole and whole[cols_[0] : cols_[1]],
    )
    plotly(fig, key=f"{key}_window")
    row = st.number_input(t("views.one_row"), 0, record.q_len - 1, key=f"{key}_row")
    weights = record.weights(layer, head, (int(row), int(row) + 1), (0, record.k_len))[0]
    plotly(
        make_row_figure(
            weights, labels, visible=record.mask(layer, (int(row), int(row) + 1))[0], title=plain_text(labels[row])
        ),
        key=f"{key}_row_fig",
    )


def _selected_box(event) -> tuple[int, int] | None:
    """The top-left (query, key) of a box selection on a pooled view, in token positions."""
    try:
        box = event.selection.box[0]
    except (AttributeError, IndexError, KeyError, TypeError):
        return None
    xs, ys = box.get("x") or [], box.get("y") or []
    if not xs or not ys:
        return None
    return max(0, round(min(ys))), max(0, round(min(xs)))


def stats_section(record: AttentionRecord, record_key: tuple, key: str) -> None:
    """The per-head statistics: a chart of one statistic and the whole table."""
    from attnviz.head_stats import STAT_COLUMNS, describe_flags

    metric = st.selectbox(t("views.statistic"), STAT_COLUMNS, key=f"{key}_metric")
    plotly(stats_figure(record_key, metric, record), key=f"{key}_stats_chart")
    st.dataframe(
        record.statistics,
        key=f"{key}_stats_table",
        hide_index=True,
        width="stretch",
        column_config={"flags": st.column_config.TextColumn("flags", width="large")},
    )
    st.caption(t("views.stats_caption", flags=describe_flags()))


TRAINING_LIVE = "training_live"  # the curves of the training in progress, which a stop leaves behind
TRAINING_DRAW_EVERY_S = 1.0  # redraw the live chart at most this often; the progress bar, every 0.1 s


@st.cache_resource(show_spinner=False)
def finished_trainings() -> BoundedCache:
    """Finished trainings by config, shared read-only by every session; a stopped training is never stored."""
    return BoundedCache(max_bytes=2**20, max_entries=settings.TRAIN_CACHE_ENTRIES)


def train_live(config: TrainingConfig) -> list[RunResult]:
    """Train the three runs with a progress bar, a Stop button and a live chart; a Stop interrupts it (a rerun)."""
    live = st.session_state[TRAINING_LIVE] = {"config": config, "losses": {}, "accuracies": {}, "step": 0}
    for kind in SCALE_KINDS:
        live["losses"][kind], live["accuracies"][kind] = [], []
    bar = st.progress(0.0, text=t("ui_training.starting"))
    stop = st.empty()
    stop.button(t("ui_training.stop"), key="training_stop", help=t("ui_training.stop_help"))
    chart = st.empty()
    drawn = {"bar": 0.0, "chart": 0.0, "n": 0}

    def on_step(kind: str, step: int, loss: float, accuracy: float) -> None:
        live["losses"][kind].append(loss)
        live["accuracies"][kind].append(accuracy)
        if kind != SCALE_KINDS[-1]:
            return
        live["step"], now = step, time.perf_counter()
        if now - drawn["bar"] >= 0.1 or step == config.steps:  # each message lets a Stop interrupt here
            drawn["bar"] = now
            bar.progress(step / config.steps, text=t("ui_training.step", step=step, steps=config.steps))
        if now - drawn["chart"] >= TRAINING_DRAW_EVERY_S:
            drawn["chart"], drawn["n"] = now, drawn["n"] + 1
            fig = make_training_figure(live["losses"], live["accuracies"], steps=config.steps, n_values=config.values)
            with chart:
                plotly(fig, key=f"training_live_{drawn['n']}")

    results = training.train_scale(config, on_step=on_step)  # looked up on each call: tests count the trainings
    for placeholder in (bar, stop, chart):
        placeholder.empty()
    return results


def lab_mask_input(labels: list[str], causal: bool) -> LabMask:
    """The Mask lab's mask: a kind and its settings, or the user's own; stops the page until there is a valid one."""
    T = len(labels)
    kind = st.selectbox(t("mask_ui.mask"), list(MASK_KINDS), format_func=kind_label, key="mask_kind")
    try:
        if kind == "custom":
            lab = custom_mask_input(labels, causal)
            if lab is None:
                st.stop()
            return lab
        cols = st.columns(3)
        options = {}
        if kind in ("padding", "causal+padding"):
            options["pads"] = cols[0].number_input(t("mask_ui.pads"), 1, T - 1, min(4, T - 1), key="mask_pads")
            options["side"] = cols[1].radio(
                t("mask_ui.side"),
                ["right", "left"],
                format_func=lambda side: t(f"mask_ui.side_{side}"),
                horizontal=True,
                key="mask_side",
            )
            cols[2].caption(t("mask_ui.pads_caption"))
        elif kind == "sliding":
            options["window"] = cols[0].number_input(t("mask_ui.window"), 1, T, min(4, T), key="mask_w")
        elif kind == "prefix":
            options["prefix"] = cols[0].number_input(t("mask_ui.prefix"), 0, T, min(4, T), key="mask_prefix")
        elif kind == "document":
            lengths = cols[0].text_input(t("mask_ui.documents"), f"{T // 2}, {T - T // 2}", key=f"mask_docs_{T}")
            options["documents"] = parse_lengths(lengths, t("mask_ui.documents_what"))
            options["causal"] = causal
        return built_mask(kind, T, **options)
    except (ValueError, TypeError) as err:
        st.error(t("mask_ui.invalid_mask", error=err))
        st.stop()


MASK_EDIT_TOKENS = 24  # the clickable grid is offered up to this many tokens; longer texts upload a file


def custom_mask_input(labels: list[str], causal: bool) -> LabMask | None:
    """A user's own (T, T) mask, uploaded or edited by clicking; None (after saying why) until there is one."""
    T = len(labels)
    upload, edit = st.tabs([t("mask_ui.upload_tab"), t("mask_ui.edit_tab")])
    with upload:
        file = st.file_uploader(
            t("mask_ui.upload", T=T, mib=settings.MASK_MAX_BYTES // 2**20),
            type=[s.lstrip(".") for s in MASK_SUFFIXES],
            key="mask_upload",
        )
        convention = st.radio(
            t("mask_ui.convention"),
            ["auto", "keep", "block"],
            format_func=lambda convention: t(f"mask_ui.convention_{convention}"),
            horizontal=True,
            key="mask_convention",
        )
    with edit:
        if T > MASK_EDIT_TOKENS:
            st.info(t("mask_ui.grid_too_long", most=MASK_EDIT_TOKENS, T=T))
            grid = None
        else:
            start = pd.DataFrame(
                (torch.ones(T, T, dtype=torch.bool).tril() if causal else torch.ones(T, T, dtype=torch.bool)).numpy(),
                index=labels,
                columns=labels,
            )
            st.caption(t("mask_ui.grid_caption"))
            grid = st.data_editor(start, key=f"mask_grid_{T}_{causal}", width="stretch")
    if file is not None:
        try:
            loaded = read_mask_bytes(file.getvalue(), file.name)
        except MaskFileError as err:
            st.error(markdown_text(str(err)))
            return None
        raw = loaded.mask
        if raw.ndim == 3 and raw.shape[0] == 1:
            raw = raw[0]
        if tuple(raw.shape) != (T, T):
            st.error(t("mask_ui.wrong_shape", name=loaded.name, shape=tuple(loaded.mask.shape), T=T))
            return None
        for note in loaded.notes:
            st.caption(note)
        if raw.dtype == torch.bool:
            if convention == "auto":
                convention, why = infer_convention(raw)
                st.caption(t("mask_ui.inferred", convention=convention, why=why))
        else:
            convention = "additive"
        return custom_mask(raw, convention)
    if grid is not None:
        return custom_mask(torch.tensor(grid.to_numpy(dtype=bool)), "keep")
    st.info(t("mask_ui.upload_or_edit"))
    return None


KV_DEFAULT_PRESET = "gemma-2-9b"  # sliding and full layers: the plateau, and engines that differ
KV_SOURCES = {
    "preset": "A preset (a real model's config)",
    "bundled": "A bundled model",
    "upload": "A config.json (upload or paste)",
    "folder": "A local model folder",
    "sidebar": "The sidebar's model",
}


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
                format_func=lambda k: PRESETS[k].shown_title,
                key="kv_preset",
            )
            preset = PRESETS[key]
            st.caption(t("kv_ui.preset_caption", source=preset.source, note=preset.note))
            return config_from_dict(copy.deepcopy(preset.config), name=preset.shown_title)
        if how == "bundled":
            key = st.selectbox(
                t("kv_ui.bundled"), list(BUNDLED), format_func=lambda k: BUNDLED[k].title, key="kv_bundled"
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
        st.error(t("kv_ui.config_error", error=err))
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


KV_DECODE_TOKENS = (32, 64, 128)  # what one visitor may time on the page; the README has 512 and 1,024


def kv_checks(settings_: Settings) -> None:
    """The checks on the sidebar's model: its real cache against the estimate, decode speed, and MHA -> GQA."""
    st.subheader(t("kv_ui.checked", model=settings_.spec.title if settings_.spec else t("kv_ui.no_model")))
    source = current_source(settings_)
    if source is None:
        return
    measured, speed, whatif = st.tabs([t("kv_ui.tab_measured"), t("kv_ui.tab_speed"), t("kv_ui.tab_whatif")])
    with measured:
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
                st.info(t("kv_ui.no_cache", error=err))
            else:
                shown = checks.rename(columns=lambda column: t(MEASURED_HEADERS[column]))  # cached: English keys
                table(shown, key="kv_measured_table", hide_index=True, width="stretch")
                worst = int(checks["error (bytes)"].abs().max())
                st.caption(t("kv_ui.largest_error", worst=worst, n=len(checks)))
    with speed:
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
                st.info(t("kv_ui.cannot_decode", error=err))
            else:
                cache, recompute = timings["cache"], timings["recompute"]
                lines = {
                    t("kv_ui.with_cache", s=cache.total): cache.seconds_per_token,
                    t("kv_ui.recomputing", s=recompute.total): recompute.seconds_per_token,
                }
                plotly(make_decode_figure(lines), "kv_decode_fig")
                speedup = timings["recompute"].total / timings["cache"].total
                st.caption(t("kv_ui.speedup", speedup=speedup, n=n_new))
    with whatif:
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
            st.info(t("kv_ui.not_for_model", error=err))
        else:
            summary = whatif_summary(whatif_layers)
            if summary.empty:
                st.info(t("kv_ui.single_kv_head"))
            else:
                plotly(make_whatif_figure(summary), "kv_whatif_fig")
                table(summary, key="kv_whatif_table", hide_index=True, width="stretch")


def _offered(value, options) -> bool:
    """Whether ``value`` is one of ``options``, type included: the label "3" is not the head 3, nor True the layer 1."""
    if isinstance(options, range):
        return type(value) is int and value in options
    return any(type(value) is type(option) and value == option for option in options)


def valid_choice(key: str, options, default) -> None:
    """Put ``default`` in ``st.session_state[key]`` when it holds nothing yet or a value ``options`` no longer offer.

    Call it just before drawing a widget whose options follow the text, the model or the record's shape, and
    before reading the key. After the sidebar changes, Streamlit hands back the previous choice as it was: the
    old label as a string ("10 ."), or an index past the new end (layer 29 of a model with 6). The widget would
    reset it only once drawn; anything read before then, or a value the page set itself, would be stale. For a
    multiselect (a list), the choices still offered are kept. A number input or slider passes its
    ``range(low, high + 1)``.
    """
    value = st.session_state.get(key)
    if isinstance(value, list):
        kept = [v for v in value if _offered(v, options)]
        if len(kept) != len(value):
            st.session_state[key] = kept
    elif key not in st.session_state or not _offered(value, options):
        st.session_state[key] = default


def export_menu(
    key: str, *, fig: go.Figure | None = None, table: pd.DataFrame | None = None, tensors=None, label: str | None = None
) -> None:
    """One small "Export" popover: the camera's format and offline HTML for ``fig``, CSV for ``table``, and
    safetensors / npz for ``tensors`` (an :class:`attnviz.exports.TensorExport`).

    Every file is built on the click (``st.download_button(data=callable)``): an HTML file inlines plotly.js
    (~4.6 MB), which no rerun should pay for. A tensor export over the bound says so instead of offering a button.
    """
    import functools

    from attnviz import exports

    stem = exports.file_stem(key)
    with st.popover(label or t("exports.menu"), icon=":material/download:"):
        if fig is not None:
            st.segmented_control(
                t("exports.camera"),
                exports.IMAGE_FORMATS,
                default="svg",
                required=True,
                format_func=str.upper,
                key=f"{key}_image_format",
                help=t("exports.camera_help"),
            )
            st.download_button(
                t("exports.html"),
                data=functools.partial(exports.figure_html, fig, key),
                file_name=f"{stem}.html",
                mime="text/html",
                key=f"{key}_html",
                on_click="ignore",
                help=t("exports.html_help"),
            )
        if table is not None:
            st.download_button(
                t("exports.csv"),
                data=functools.partial(exports.table_csv, table),
                file_name=f"{stem}.csv",
                mime="text/csv",
                key=f"{key}_csv",
                on_click="ignore",
            )
        if tensors is not None:
            if tensors.too_large:
                st.caption(
                    t(
                        "exports.too_large",
                        size=f"{tensors.nbytes / 2**20:,.1f}",
                        limit=f"{exports.TENSOR_EXPORT_MAX_BYTES / 2**20:,.0f}",
                    )
                )
                return
            for fmt, mime in exports.TENSOR_FORMATS.items():
                st.download_button(
                    t("exports.tensors", format=fmt),
                    data=functools.partial(exports.tensor_file, tensors, fmt),
                    file_name=f"{stem}.{fmt}",
                    mime=mime,
                    key=f"{key}_{fmt}",
                    on_click="ignore",
                )


def table(df: pd.DataFrame, key: str, *, tensors=None, **kwargs):
    """``st.dataframe`` with an Export menu under it: the table as CSV (and ``tensors``, if given)."""
    event = st.dataframe(df, key=key, **kwargs)
    export_menu(key, table=df, tensors=tensors)
    return event


LINK_TEXT_CHARS = 500  # a longer text stays out of the link (URLs that long break in chats and mail)
_LINK_BOUNDS = (settings.MAX_TOKENS, settings.D_MODEL, settings.N_HEAD, settings.N_KV_HEAD, settings.N_LAYER)
LINK_NUMBERS = {bound.name: bound for bound in (*_LINK_BOUNDS, settings.SEED)}
LINK_EMBEDDED = ("d_model", "n_head", "n_kv_head", "n_layer", "seed", "causal")  # only for the embedded model


def _read_link() -> list[str]:
    """Put the link's ?text=, ?model=, ?max_tokens= (and the embedded model's settings) into session_state;
    return the names of the values it ignored. Never raises on what a link holds."""
    query, ignored = st.query_params, []
    text = query.get("text")
    if text is not None:
        if len(text) <= LINK_TEXT_CHARS:
            st.session_state.text = text
        else:
            ignored.append("text")
    model = query.get("model")
    if model is not None:
        if model != "path" and model in model_options():  # a typed folder stays on the machine that has it
            st.session_state.model = model
        else:
            ignored.append("model")
    for name, bound in LINK_NUMBERS.items():
        value = query.get(name)
        if value is None:
            continue
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is not None and bound.low <= number <= bound.high:
            st.session_state[name] = number
        else:
            ignored.append(name)
    if (causal := query.get("causal")) is not None:
        if causal in ("0", "1"):
            st.session_state.causal = causal == "1"
        else:
            ignored.append("causal")
    return ignored


def link_values() -> tuple[dict[str, str], bool]:
    """What the link carries for the sidebar's current values (defaults left out), and whether the text is too long."""
    state, values = st.session_state, {}
    long_text = len(state.text) > LINK_TEXT_CHARS
    if state.text != DEFAULTS["text"] and not long_text:
        values["text"] = state.text
    if state.model != DEFAULTS["model"] and state.model != "path":
        values["model"] = state.model
    for name in ("max_tokens", *LINK_EMBEDDED):
        if name in LINK_EMBEDDED and state.model != EMBEDDED:
            continue
        if state.get(name, DEFAULTS[name]) != DEFAULTS[name]:
            values[name] = str(int(state[name]))
    return values, long_text


def link_settings() -> None:
    """Keep the shared inputs in the link: ?text=&model= (and the token limit, and the embedded model's settings
    when they are not the defaults).

    Call it in :func:`sidebar` after :func:`init_state`, before the widgets: on the session's first run the link's
    values go into session_state (a model the sidebar does not offer, or a number out of its bounds, is ignored
    with a caption); every run then writes the current values back, so a copied link reopens this view. The
    page is the URL's path; a page keeps its own ?layer=&head=. The text is data: it only fills the text box.
    """
    if "link_read" not in st.session_state:
        st.session_state.link_read = True
        if ignored := _read_link():
            st.sidebar.caption(t("links.ignored", names=", ".join(ignored)))
    values, long_text = link_values()
    for name in ("text", "model", *LINK_NUMBERS, "causal"):
        if name not in values and name in st.query_params:
            del st.query_params[name]
        elif name in values and st.query_params.get(name) != values[name]:
            st.query_params[name] = values[name]
    if long_text:
        st.sidebar.caption(t("links.text_too_long", limit=LINK_TEXT_CHARS))


def _linked_choice(name: str, options):
    """The link's ?<name>= as one of ``options`` (an int, or "mean"), or None."""
    value = st.query_params.get(name)
    if value is None:
        return None
    if value != "mean":
        try:
            value = int(value)
        except ValueError:
            return None
    return value if _offered(value, options) else None


def link_layer_head(key: str, layers, heads) -> None:
    """On this page's first run in the session, open the link's ?layer=&head= (in ``<key>_layer``/``<key>_head``).

    Call it before the pickers; then :func:`keep_layer_head_in_link` after them. A value the page does not offer
    is ignored with a caption.
    """
    if f"{key}_link_read" in st.session_state:
        return
    st.session_state[f"{key}_link_read"] = True
    for name, options in (("layer", layers), ("head", heads)):
        if name not in st.query_params:
            continue
        value = _linked_choice(name, options)
        if value is None:
            st.caption(t("links.bad_choice", name=name))
        else:
            st.session_state[f"{key}_{name}"] = value


def keep_layer_head_in_link(layer: int, head) -> None:
    """Write the page's layer and head to the link (only when they changed: each write is a message)."""
    if st.query_params.get("layer") != str(layer) or st.query_params.get("head") != str(head):
        st.query_params.update(layer=str(layer), head=str(head))


def model_options() -> dict[str, str | None]:
    """The sidebar's models: the embedded and bundled ones, the operator's folders (``ATTNVIZ_MODELS``) and,
    except on a hosted server, a free path or hub id ("path")."""
    offered = {**CHOICES, **hosted.operator_models()}
    return offered if hosted.is_hosted() else {**offered, "path": None}


def model_label(choice: str) -> str:
    return model_options().get(choice) or t("sidebar.model_path_choice")


BUDGET_CONFIRMED = "budget_confirmed"  # the settings' keys this session chose to run over the budget


def within_budget(settings_: Settings, source: AttentionSource) -> bool:
    """Whether to capture the sidebar's text with ``source``: tokens x layers x heads within the request budget.

    Over it, a hosted server refuses with the numbers and what to change; a local one says the same and offers a
    button that runs it anyway (remembered for these settings in this session).
    """
    n_tokens = len(source.encode(settings_.text, settings_.max_tokens).tokens)
    cost = hosted.request_cost(source.n_layer, source.n_head, source.n_kv_head, source.head_dim, n_tokens)
    if not cost.over:
        return True
    gb, seconds = f"{cost.peak_gb:,.1f}", f"{cost.seconds:,.0f}"
    why = t(
        "hosted.over_budget",
        tokens=f"{cost.tokens:,}",
        n_layer=cost.n_layer,
        n_head=cost.n_head,
        head_tokens=f"{cost.head_tokens:,}",
        budget=f"{cost.budget:,}",
        gb=gb,
        seconds=seconds,
    )
    change = t("hosted.budget_change", max_tokens=f"{cost.max_tokens:,}", layer_heads=f"{cost.max_layer_heads:,}")
    if hosted.is_hosted():
        st.error(f"{why} {change}")
        return False
    confirmed = st.session_state.setdefault(BUDGET_CONFIRMED, set())
    if settings_.key() in confirmed:
        st.caption(t("hosted.over_budget_confirmed", gb=gb, seconds=seconds))
        return True
    st.warning(f"{why} {change} {t('hosted.local_confirm')}")
    if st.button(t("hosted.run_anyway", gb=gb, seconds=seconds), key="budget_run_anyway"):
        confirmed.add(settings_.key())
        return True
    return False


TRAINING_LEDGER = "training_ledger"  # this session's hosted training time (hosted.TrainingLedger)


def capped_training(config: TrainingConfig) -> list[RunResult]:
    """:func:`train_live`, within the session's training time on a hosted server; over it, stops after saying
    how long to wait. A stopped training counts the time it ran."""
    if not hosted.is_hosted():
        return train_live(config)
    ledger = st.session_state.setdefault(TRAINING_LEDGER, hosted.TrainingLedger())
    needed = hosted.training_seconds(training.training_macs(config))
    try:
        ledger.check(needed, time.time())
    except hosted.TrainingCapError as err:
        values = {"cap": settings.TRAIN_SESSION_SECONDS, "minutes": settings.TRAIN_SESSION_WINDOW_S // 60}
        if err.wait_s == float("inf"):
            st.error(t("hosted.training_too_long", needed=f"{err.needed_s:.0f}", **values))
        else:
            st.error(
                t(
                    "hosted.training_cap",
                    used=f"{err.used_s:.0f}",
                    needed=f"{err.needed_s:.0f}",
                    wait=f"{err.wait_s:.0f}",
                    **values,
                )
            )
        st.stop()
    start = time.time()
    try:
        return train_live(config)
    finally:
        ledger.charge(time.time() - start, time.time())

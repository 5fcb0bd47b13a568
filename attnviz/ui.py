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
import time
from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
import torch
from streamlit.runtime.pages_manager import PagesManager

from attnviz import settings, training
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
from attnviz.kv_figures import make_decode_figure, make_whatif_figure
from attnviz.kv_measure import decode_timing
from attnviz.kv_memory import ConfigError, KVConfig, config_from_dict, kv_config_of, load_config, parse_config_json
from attnviz.kv_presets import PRESETS
from attnviz.kv_report import KV_MEASURE_LENGTHS, measured_vs_estimated, whatif_summary
from attnviz.mask_doctor import parse_lengths
from attnviz.mask_io import MASK_SUFFIXES, MaskFileError, infer_convention, read_mask_bytes
from attnviz.mask_lab import KINDS as MASK_KINDS
from attnviz.mask_lab import LabMask, built_mask, custom_mask
from attnviz.record import LABEL_CHARS, AttentionRecord, Head, cut_tokens, head_label
from attnviz.source import AttentionSource, ModelUnavailableError
from attnviz.sources import CHOICES, EMBEDDED, SourceSpec, open_source, preparation_note, prepare_source
from attnviz.token_display import markdown_text, plain_text
from attnviz.training import SCALE_KINDS, RunResult, TrainingConfig
from attnviz.training_figures import make_training_figure

MODEL_CHOICES = {**CHOICES, "path": "Local folder or hub id…"}
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


def pages() -> list[st.Page]:
    """Every page of the app, in menu order."""
    return [
        st.Page("pages/overview.py", title="Overview", icon="🏠", default=True),
        st.Page("pages/heads.py", title="Heads", icon="🧠"),
        st.Page("pages/tokens.py", title="Token view", icon="🔤"),
        st.Page("pages/head_roles.py", title="Head roles", icon="🧩"),
        st.Page("pages/parity.py", title="Parity", icon="⚖️"),
        st.Page("pages/generation.py", title="Generation", icon="✍️"),
        st.Page("pages/padding.py", title="Padding", icon="🧱"),
        st.Page("pages/masks.py", title="Mask lab", icon="🎭"),
        st.Page("pages/kv_cache.py", title="KV cache", icon="🗄️"),
        st.Page("pages/scaling.py", title="Scaling", icon="📐"),
        st.Page("pages/training.py", title="Training", icon="📉"),
        st.Page("pages/walkthrough.py", title="Walkthrough", icon="🪜"),
        st.Page("pages/cost.py", title="Cost", icon="⏱️"),
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
        st.switch_page(st.navigation(pages(), position="hidden"))


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


def _use_example() -> None:
    """Put the example in the text box; a Chinese example switches MiniLM, which reads almost no Chinese, to SmolLM2."""
    st.session_state.text = settings.EXAMPLES[st.session_state.example]
    if st.session_state.example in settings.CHINESE_EXAMPLES and st.session_state.get("model") == "minilm":
        st.session_state.model = settings.CHINESE_MODEL
        st.session_state.example_note = (
            "MiniLM's vocabulary holds only 244 Chinese characters, so the model switched to SmolLM2, which reads "
            "any text as bytes."
        )


def _bounded_input(container, label: str, bound: settings.Bound, key: str, **kwargs) -> None:
    container.number_input(label, min_value=bound.low, max_value=bound.high, key=key, **kwargs)


def sidebar() -> Settings:
    """Draw the shared sidebar and return the settings it holds."""
    init_state()
    with st.sidebar:
        st.header("Text")
        st.selectbox("Example", list(settings.EXAMPLES), key="example", on_change=_use_example)
        st.text_area("Text to analyse", key="text", height=110)
        _bounded_input(
            st,
            "Max tokens",
            settings.MAX_TOKENS,
            "max_tokens",
            step=16,
            help="Longer texts are cut; a model with fewer positions (MiniLM: 512) stops at its own limit.",
        )

        st.header("Model")
        st.selectbox("Model", list(MODEL_CHOICES), key="model", format_func=MODEL_CHOICES.get)
        if st.session_state.model == "path":
            st.text_input("Model folder or hub id", key="model_path", placeholder="/path/to/model or org/name")
        with st.expander("Embedded model settings", expanded=st.session_state.model == EMBEDDED):
            st.caption("attnviz's own attention with seeded random weights.")
            cols = st.columns(2)
            _bounded_input(cols[0], "d_model", settings.D_MODEL, "d_model", step=2)
            _bounded_input(cols[1], "n_head", settings.N_HEAD, "n_head")
            _bounded_input(cols[0], "n_kv_head", settings.N_KV_HEAD, "n_kv_head", help="0 = same as n_head (MHA)")
            _bounded_input(cols[1], "n_layer", settings.N_LAYER, "n_layer")
            _bounded_input(cols[0], "seed", settings.SEED, "seed")
            cols[1].checkbox("causal", key="causal", help="decoder-style: no attending to later tokens")

        st.header("Device")
        st.selectbox("Device", DEVICE_CHOICES, key="device")
        try:
            device = resolve_device(st.session_state.device)
            st.caption(f"Running on **{device}**")
        except ValueError as err:
            st.error(str(err))
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
                    raise ValueError("type the path of a local Hugging Face model folder (or a hub id)")
                spec = SourceSpec(path, device, allow_pickle=ALLOW_PICKLE)
            else:
                spec = SourceSpec(source, device)
        except ValueError as err:
            error = f"Invalid model settings: {err}"
            st.error(error)
    return Settings(text=st.session_state.text, max_tokens=int(st.session_state.max_tokens), spec=spec, error=error)


@st.cache_resource(max_entries=4, show_spinner=False)
def load_source(spec: SourceSpec) -> AttentionSource:
    """One model per spec, loaded once per process and shared read-only by every session."""
    return open_source(spec)


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
                bar = st.progress(0.0, text="Starting")
                prepare_source(spec, progress=lambda fraction, message: bar.progress(fraction, text=message))
                status.update(label=f"{spec.title} is ready", state="complete", expanded=False)
        with st.spinner(f"Loading {spec.title}…"):
            return load_source(spec)
    except ModelUnavailableError as err:
        st.error(str(err))
        return None


def current_source(settings_: Settings) -> AttentionSource | None:
    """The sidebar's model, loaded; None after telling the user why not."""
    if settings_.error or settings_.spec is None:
        st.error(settings_.error or "Choose a model in the sidebar.")
        return None
    return source_for(settings_.spec)


def require_source(settings_: Settings) -> AttentionSource:
    """The sidebar's model, loaded; otherwise the page stops after saying why."""
    source = current_source(settings_)
    if source is None:
        st.stop()
    return source


def require_text(settings_: Settings, hint: str = "Type some text in the sidebar (or pick an example).") -> None:
    """Stop the page with ``hint`` while the sidebar's text is empty."""
    if not settings_.text.strip():
        st.info(hint)
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
        f"Capturing {n_tokens:,} tokens of this model would hold {need / 2**20:,.0f} MB, more than this server keeps "
        f"for one result ({bound / 2**20:,.0f} MB, set by `{settings.CACHE_MB_ENV}`). Lower **Max tokens** to "
        f"{fit:,} or fewer."
    )
    return False


def record_for(source: AttentionSource, settings_: Settings) -> AttentionRecord:
    """The capture of the sidebar's text, from the shared cache."""
    return cached(
        "record",
        settings_.key(),
        lambda: source.run(settings_.text, settings_.max_tokens),
        "Capturing attention…",
    )


def current_record(settings_: Settings) -> AttentionRecord | None:
    """The record for the sidebar's settings, or None after telling the user why not."""
    source = current_source(settings_)
    if source is None:
        return None
    if not settings_.text.strip():
        st.info("Type some text in the sidebar (or pick an example) to see its attention.")
        return None
    try:
        if not fits_the_cache(source, settings_):
            return None
        record = record_for(source, settings_)
    except ModelUnavailableError as err:
        st.error(str(err))
        return None
    if not record.tokens:
        st.info("That text has no tokens to attend to. Try some words.")
        return None
    if len(record.tokens) == 1:
        st.info(
            "This text is a single token: with one token there is nothing to attend to but itself, so every head "
            "puts all its weight on it. Type a few more words."
        )
        return None
    note = st.session_state.pop("example_note", None)
    if note:
        st.info(note)
    coverage_warning(record)
    if record.truncated:
        why = (
            "raise **Max tokens** in the sidebar to see more"
            if len(record.tokens) >= settings_.max_tokens
            else f"this model reads at most {len(record.tokens):,} tokens"
        )
        st.warning(
            f"The text has {record.n_input_tokens:,} tokens; only the first {len(record.tokens):,} are shown ({why})."
        )
    return record


LONG_TOKENS_LISTED = 20  # cut tokens listed whole under the chart


def coverage_warning(record: AttentionRecord) -> None:
    """Warn when the model's tokenizer read much of the text as its unknown token, and name a model that reads it."""
    real = [t for t in record.tokens if not t.special and not t.pad]
    unknown = sum(t.unknown for t in real)
    if real and unknown / len(real) >= settings.UNKNOWN_SHARE_WARNING:
        st.warning(
            f"{markdown_text(record.model_name)} read {unknown} of this text's {len(real)} tokens as its unknown token "
            "([UNK]): its vocabulary does not cover this text, so those positions carry no meaning. SmolLM2 reads "
            "any text (its tokenizer falls back to bytes): pick it in the sidebar."
        )
    cut = cut_tokens(record.tokens)
    if cut:
        st.caption(
            f"{len(cut)} long token{'s are' if len(cut) > 1 else ' is'} cut to {LABEL_CHARS} characters in the labels: "
            "hover a cell of the large view for the beginning, or open the list below."
        )
        with st.expander("Long tokens in full"):
            for i, text in cut[:LONG_TOKENS_LISTED]:
                st.text(f"{i}: {text}")
            if len(cut) > LONG_TOKENS_LISTED:
                st.caption(f"… and {len(cut) - LONG_TOKENS_LISTED:,} more.")


def layer_head_picker(n_layer: int, n_head: int, key: str, with_mean: bool = True) -> tuple[int, Head]:
    """Two selectboxes side by side: a layer and a head (or "mean")."""
    cols = st.columns(2)
    heads = [*range(n_head), "mean"] if with_mean else list(range(n_head))
    valid_choice(f"{key}_layer", range(n_layer), 0)  # L29 of SmolLM2 is no layer of MiniLM's six
    valid_choice(f"{key}_head", heads, 0)
    layer = cols[0].selectbox("Layer", range(n_layer), key=f"{key}_layer", format_func=lambda i: f"L{i}")
    head = cols[1].selectbox("Head", heads, key=f"{key}_head", format_func=head_label)
    return layer, head


def plotly(fig: go.Figure, key: str, **kwargs):
    """Render a figure at full width with a stable key; returns the selection event when asked for one."""
    return st.plotly_chart(fig, key=key, width="stretch", config={"displaylogo": False}, **kwargs)


@st.cache_data(max_entries=32, show_spinner=False)
def grid_figure(
    record_key: tuple, gamma: float, _record: AttentionRecord, show: str = "all heads", compact: bool = False
) -> go.Figure:
    """The layer x head grid of a record (keyed by what produced the record), flags on hover.

    ``show`` is one of :func:`grid_show_options` (dim all but one flag, or sort each
    layer's heads by a statistic); ``compact`` fits the grid in about 900 px.
    """
    from attnviz.figures import grid_view

    view = grid_view(_record.statistics, _record.n_layer, _record.n_head, show)
    return make_head_grid_figure(
        _record.pooled_grid("max"), mean=_record.mean_grid(), gamma=gamma, max_height=900 if compact else None, **view
    )


@st.cache_data(max_entries=32, show_spinner=False)
def stats_figure(record_key: tuple, metric: str, _record: AttentionRecord) -> go.Figure:
    return make_head_stats_figure(_record.statistics, metric)


def resolution_note(record: AttentionRecord) -> str:
    """What the large view shows, in words."""
    if record.full_view:
        return f"Full resolution: all {record.q_len:,} × {record.k_len:,} weights, exact on hover."
    b = record.bin_size
    return (
        f"Pooled: {record.q_len:,} tokens are drawn as {-(-record.q_len // b)} × {-(-record.k_len // b)} cells, "
        f"each the max (or mean) over {b} × {b} tokens. Select a region with the box tool, or type one below, "
        "to see it at full resolution."
    )


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
    kind = st.radio("Pooling", ["max", "mean"], key=f"{key}_pool", horizontal=True)
    pooled = record.pooled(layer, head, kind)
    fig = make_pooled_head_figure(
        pooled, record.bin_size, record.q_len, record.k_len, title=f"{title}, {kind}-pooled", gamma=gamma, kind=kind
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
    side = int(cols[2].select_slider("Window", WINDOW_SIDES, key=f"{key}_side", help="tokens a side, full resolution"))
    forget = {
        "on_change": st.session_state.pop,
        "args": (f"{key}_box", None),
    }  # typing frees the box to be chosen again
    q0 = cols[0].number_input("Queries from", 0, max(0, record.q_len - 1), key=f"{key}_q0", step=side // 2, **forget)
    k0 = cols[1].number_input("Keys from", 0, max(0, record.k_len - 1), key=f"{key}_k0", step=side // 2, **forget)
    rows = (int(q0), min(record.q_len, int(q0) + side))
    cols_ = (int(k0), min(record.k_len, int(k0) + side))
    window = record.weights(layer, head, rows, cols_)
    mask = record.mask(layer, rows, cols_)
    fig = make_head_heatmap_figure(
        window,
        labels[rows[0] : rows[1]],
        labels[cols_[0] : cols_[1]],
        title=f"{title}: queries {rows[0]}–{rows[1] - 1}, keys {cols_[0]}–{cols_[1] - 1} at full resolution",
        gamma=gamma,
        mask=mask,
        q_hover=whole and whole[rows[0] : rows[1]],
        k_hover=whole and whole[cols_[0] : cols_[1]],
    )
    plotly(fig, key=f"{key}_window")
    row = st.number_input("One query row, every key", 0, record.q_len - 1, key=f"{key}_row")
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

    metric = st.selectbox("Statistic", STAT_COLUMNS, key=f"{key}_metric")
    plotly(stats_figure(record_key, metric, record), key=f"{key}_stats_chart")
    st.dataframe(
        record.statistics,
        key=f"{key}_stats_table",
        hide_index=True,
        width="stretch",
        column_config={"flags": st.column_config.TextColumn("flags", width="large")},
    )
    st.caption(
        "Averaged over the query rows that see at least two keys. entropy in nats; entropy_norm = entropy / "
        f"log(visible keys) (1 = uniform). Flags: {describe_flags()}."
    )


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
    bar = st.progress(0.0, text="Starting: building the three models…")
    stop = st.empty()
    stop.button("Stop", key="training_stop", help="Ends the training; the curves so far stay on the page.")
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
            bar.progress(step / config.steps, text=f"Step {step} of {config.steps}")
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
    kind = st.selectbox("Mask", list(MASK_KINDS), format_func=MASK_KINDS.get, key="mask_kind")
    try:
        if kind == "custom":
            lab = custom_mask_input(labels, causal)
            if lab is None:
                st.stop()
            return lab
        cols = st.columns(3)
        options = {}
        if kind in ("padding", "causal+padding"):
            options["pads"] = cols[0].number_input("pad tokens", 1, T - 1, min(4, T - 1), key="mask_pads")
            options["side"] = cols[1].radio("padded on", ["right", "left"], horizontal=True, key="mask_side")
            cols[2].caption(
                "The text's last (or first) tokens stand for the pads of a shorter sequence in a batch; the Padding "
                "page runs a real batch with pad tokens."
            )
        elif kind == "sliding":
            options["window"] = cols[0].number_input("window W (keys a query sees)", 1, T, min(4, T), key="mask_w")
        elif kind == "prefix":
            options["prefix"] = cols[0].number_input("prefix P", 0, T, min(4, T), key="mask_prefix")
        elif kind == "document":
            lengths = cols[0].text_input("document lengths, in tokens", f"{T // 2}, {T - T // 2}", key=f"mask_docs_{T}")
            options["documents"] = parse_lengths(lengths, "document lengths")
            options["causal"] = causal
        return built_mask(kind, T, **options)
    except (ValueError, TypeError) as err:
        st.error(f"Invalid mask: {err}")
        st.stop()


MASK_EDIT_TOKENS = 24  # the clickable grid is offered up to this many tokens; longer texts upload a file


def custom_mask_input(labels: list[str], causal: bool) -> LabMask | None:
    """A user's own (T, T) mask, uploaded or edited by clicking; None (after saying why) until there is one."""
    T = len(labels)
    upload, edit = st.tabs(["Upload a file", "Edit a grid"])
    with upload:
        file = st.file_uploader(
            f"A ({T}, {T}) mask: .npy, .pt, .safetensors or .csv (at most {settings.MASK_MAX_BYTES // 2**20} MiB)",
            type=[s.lstrip(".") for s in MASK_SUFFIXES],
            key="mask_upload",
        )
        convention = st.radio(
            "A bool mask's True means",
            ["auto", "keep", "block"],
            format_func={
                "auto": "let the doctor infer it",
                "keep": "may attend (torch SDPA)",
                "block": "blocked (nn.MultiheadAttention)",
            }.get,
            horizontal=True,
            key="mask_convention",
        )
    with edit:
        if T > MASK_EDIT_TOKENS:
            st.info(
                f"The grid is for texts of at most {MASK_EDIT_TOKENS} tokens; this one has {T}. Shorten the text "
                "(or lower Max tokens) to edit by clicking, or upload a file."
            )
            grid = None
        else:
            start = pd.DataFrame(
                (torch.ones(T, T, dtype=torch.bool).tril() if causal else torch.ones(T, T, dtype=torch.bool)).numpy(),
                index=labels,
                columns=labels,
            )
            st.caption("Rows are queries, columns keys; a ticked cell may attend. It starts as the model's own mask.")
            grid = st.data_editor(start, key=f"mask_grid_{T}_{causal}", width="stretch")
    if file is not None:
        try:
            loaded = read_mask_bytes(file.getvalue(), file.name)
        except MaskFileError as err:
            st.error(str(err))
            return None
        raw = loaded.mask
        if raw.ndim == 3 and raw.shape[0] == 1:
            raw = raw[0]
        if tuple(raw.shape) != (T, T):
            st.error(
                f"{loaded.name} holds a mask of shape {tuple(loaded.mask.shape)}; the lab draws it over this text's "
                f"{T} tokens, so it must be ({T}, {T}). Batches (B, T, T) go to `python -m attnviz mask-doctor`."
            )
            return None
        for note in loaded.notes:
            st.caption(note)
        if raw.dtype == torch.bool:
            if convention == "auto":
                convention, why = infer_convention(raw)
                st.caption(f"Convention inferred: **{convention}**. {why}")
        else:
            convention = "additive"
        return custom_mask(raw, convention)
    if grid is not None:
        return custom_mask(torch.tensor(grid.to_numpy(dtype=bool)), "keep")
    st.info("Upload a mask, or edit the grid, to see what it does.")
    return None


KV_GROUP_HELP = "int8 and int4 (and fp8) store an fp16 scale (and a zero point) per group of this many values."
KV_WEIGHTS_HELP = "Weight matrices counted from the config's shapes (embeddings, attention, MLP or experts, LM head)."
KV_DEFAULT_PRESET = "gemma-2-9b"  # sliding and full layers: the plateau, and engines that differ
KV_SOURCES = {
    "preset": "A preset (a real model's config)",
    "bundled": "A bundled model",
    "upload": "A config.json (upload or paste)",
    "folder": "A local model folder",
    "sidebar": "The sidebar's model",
}


def block_label(block: int | None) -> str:
    return "none (contiguous)" if block is None else f"{block} tokens (paged)"


def kv_config_input(settings_: Settings) -> KVConfig:
    """The KV cache page's model config, from a preset, a bundled model, a file, a folder or the sidebar's model.

    Stops the page with a message when the config cannot be read or understood.
    """
    how = st.radio("Model", list(KV_SOURCES), format_func=KV_SOURCES.get, horizontal=True, key="kv_source")
    try:
        if how == "preset":
            keys = list(PRESETS)
            key = st.selectbox(
                "Preset",
                keys,
                index=keys.index(KV_DEFAULT_PRESET) if KV_DEFAULT_PRESET in keys else 0,
                format_func=lambda k: PRESETS[k].title,
                key="kv_preset",
            )
            preset = PRESETS[key]
            st.caption(f"Numbers from [{preset.source}]({preset.source}). {preset.note}")
            return config_from_dict(copy.deepcopy(preset.config), name=preset.title)
        if how == "bundled":
            key = st.selectbox("Bundled model", list(BUNDLED), format_func=lambda k: BUNDLED[k].title, key="kv_bundled")
            return load_config(key)
        if how == "upload":
            file = st.file_uploader("config.json", type=["json"], key="kv_upload")
            text = st.text_area("…or paste it", key="kv_paste", height=120)
            if file is not None:
                return config_from_dict(parse_config_json(file.getvalue(), file.name), name=file.name)
            if text.strip():
                return config_from_dict(parse_config_json(text, "the pasted config"), name="pasted config")
            st.info("Upload or paste a config.json to size its cache.")
            st.stop()
        if how == "folder":
            folder = st.text_input("Model folder (holding config.json)", key="kv_folder")
            if not folder.strip():
                st.info("Type the path of a local model folder.")
                st.stop()
            return load_config(folder.strip())
        source = require_source(settings_)
        st.caption("Read through the model interface: every layer full attention, no window.")
        return kv_config_of(source)
    except (ConfigError, ModelUnavailableError) as err:
        st.error(f"This config cannot be used: {err}")
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
        "GPU memory", list(GPU_PRESETS_GB), index=3, format_func=GPU_PRESETS_GB.get, key="kv_gpu"
    )
    if choice:
        return float(choice)
    return float(cols[1].number_input("GB", 1.0, 100_000.0, 80.0, key="kv_gpu_gb"))


def kv_engine_knobs() -> dict:
    """The serving engines' settings that change what they allocate."""
    cols = st.columns(4)
    return {
        "vllm_block_size": cols[0].number_input("vLLM --block-size", 1, 1024, settings.KV_VLLM_BLOCK_SIZE, key="kv_vb"),
        "vllm_max_num_batched_tokens": cols[1].number_input(
            "vLLM --max-num-batched-tokens", 1, 2**20, settings.KV_VLLM_MAX_NUM_BATCHED_TOKENS, key="kv_vbt"
        ),
        "vllm_hybrid_allocator": cols[2].toggle("vLLM hybrid KV cache manager", True, key="kv_hybrid"),
        "llamacpp_n_ubatch": cols[3].number_input(
            "llama.cpp -ub (n_ubatch)", 1, 2**16, settings.KV_LLAMACPP_N_UBATCH, key="kv_ub"
        ),
    }


KV_DECODE_TOKENS = (32, 64, 128)  # what one visitor may time on the page; the README has 512 and 1,024


def kv_checks(settings_: Settings) -> None:
    """The checks on the sidebar's model: its real cache against the estimate, decode speed, and MHA -> GQA."""
    st.subheader(f"Checked on the sidebar's model: {settings_.spec.title if settings_.spec else 'none'}")
    source = current_source(settings_)
    if source is None:
        return
    measured, speed, whatif = st.tabs(["Estimated vs measured", "Decode speed", "MHA → GQA on a real layer"])
    with measured:
        st.markdown(
            "Prefill the model with the cache on, then add up the bytes of every cached tensor (numel × element "
            "size): transformers' `DynamicCache` for a Hugging Face decoder, attnviz's `KVCache` for the embedded "
            "model. The estimate comes from the model's shape alone."
        )
        if st.toggle("Measure the cache (8 prefills)", key="kv_measure"):
            try:
                table = cached(
                    "kv_measured",
                    settings_.key(),
                    lambda: measured_vs_estimated(source, settings_.text, KV_MEASURE_LENGTHS),
                    "Prefilling and counting bytes…",
                )
            except (ValueError, ModelUnavailableError) as err:
                st.info(f"No cache to measure: {err}")
            else:
                st.dataframe(table, key="kv_measured_table", hide_index=True, width="stretch")
                worst = int(table["error (bytes)"].abs().max())
                st.caption(f"Largest error: {worst} bytes over {len(table)} prefills (batch 1 and 2).")
    with speed:
        n_new = st.radio("tokens to generate", KV_DECODE_TOKENS, horizontal=True, key="kv_decode_n")
        if st.toggle("Time greedy decoding, with the cache and without", key="kv_decode"):
            try:
                timings = cached(
                    "kv_decode",
                    (*settings_.key(), n_new),
                    lambda: {m: decode_timing(source, settings_.text, n_new, m) for m in ("cache", "recompute")},
                    f"Generating {n_new} tokens twice: with the cache, then recomputing every prefix…",
                )
            except (ValueError, ModelUnavailableError) as err:
                st.info(f"This model cannot decode here: {err}")
            else:
                cache, recompute = timings["cache"], timings["recompute"]
                lines = {
                    f"with the cache ({cache.total:.2f} s)": cache.seconds_per_token,
                    f"recomputing the prefix ({recompute.total:.2f} s)": recompute.seconds_per_token,
                }
                plotly(make_decode_figure(lines), "kv_decode_fig")
                st.caption(
                    f"Speed-up with the cache: {timings['recompute'].total / timings['cache'].total:.1f}× over "
                    f"{n_new} tokens. Without a cache each step re-reads the whole prefix, so its time grows with the "
                    "position; with it, each step reads one new token. The README has the 512 and 1,024-token runs."
                )
    with whatif:
        st.markdown(
            "Mean-pool a real MHA layer's K and V heads into groups, as the GQA paper starts its uptraining, and "
            "see how far each query head's attention moves (Jensen–Shannon divergence, nats) and how much the "
            "layer's output changes, against the cache it saves. Before any uptraining: the cost of the cut."
        )
        layer = st.selectbox("Layer", range(source.n_layer), format_func=lambda i: f"L{i}", key="kv_whatif_layer")
        try:
            table = cached(
                "kv_whatif",
                (*settings_.key(), layer),
                lambda: gqa_whatif(source.attention_layer(settings_.text, settings_.max_tokens, layer)),
                "Pooling K/V heads and rerunning the layer…",
            )
        except (ValueError, ModelUnavailableError) as err:
            st.info(f"Not for this model: {err}")
        else:
            summary = whatif_summary(table)
            if summary.empty:
                st.info("This layer has a single K/V head already (MQA): there is nothing left to pool.")
            else:
                plotly(make_whatif_figure(summary), "kv_whatif_fig")
                st.dataframe(summary, key="kv_whatif_table", hide_index=True, width="stretch")


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

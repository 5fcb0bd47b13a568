"""Streamlit glue: the shared sidebar, cached model and record loaders, friendly errors.

This is the one module of the library that imports Streamlit. Pages call
:func:`current_record` and get an :class:`AttentionRecord` (or a message has
already been shown and they stop), so no page deals with models, caching or
bad input itself.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import plotly.graph_objects as go
import streamlit as st
from streamlit.runtime.pages_manager import PagesManager

from attnviz.devices import DEVICE_CHOICES, resolve_device
from attnviz.embedded import EmbeddedConfig, EmbeddedModel
from attnviz.hf_models import (
    BUNDLED,
    HFModel,
    ModelUnavailableError,
    convert_gguf,
    converted_dir,
    is_converted,
    load_model,
    smollm2_gguf,
)
from attnviz.parity import Parity, reproduce
from attnviz.record import AttentionRecord, BatchRecord, GenerationRecord

EXAMPLES = {
    "English: the cat": "The cat sat on the mat because it was tired.",
    "English: pronouns": "The trophy did not fit in the suitcase because it was too big.",
    "中文: 猫": "猫坐在垫子上，因为它累了。",
    "中文: 注意力": "注意力机制让每个词都能看到句子里的其他词。",
    "Mixed 中英 + emoji": "Attention 注意力 is all you need 👍🏽!",
}
MAX_TOKENS_LIMIT = 2048
MODEL_CHOICES = {
    "default": "Embedded default (random weights, no download)",
    "minilm": BUNDLED["minilm"].title,
    "smollm2": BUNDLED["smollm2"].title,
    "path": "Local folder or hub id…",
}
# Pickled checkpoints load only when the server was started with this flag:
#   streamlit run app.py -- --allow-pickle
ALLOW_PICKLE = "--allow-pickle" in sys.argv[1:]

DEFAULTS = {
    "text": EXAMPLES["English: the cat"],
    "example": "English: the cat",
    "device": "auto",
    "model": "default",
    "model_path": "",
    "max_tokens": 256,
    "d_model": 64,
    "n_head": 4,
    "n_kv_head": 0,
    "n_layer": 2,
    "seed": 0,
    "causal": False,
}


@dataclass(frozen=True)
class ModelChoice:
    """Which model to run, hashable so cached results are keyed by it.

    ``source`` is "default" (embedded, configured by ``config``), "minilm",
    "smollm2", or a local folder / hub id.
    """

    source: str
    device: str
    config: EmbeddedConfig | None = None
    allow_pickle: bool = False

    @property
    def embedded(self) -> bool:
        return self.source == "default"


@dataclass(frozen=True)
class Settings:
    """What the sidebar asks for; ``error`` says why the model settings are invalid."""

    text: str
    max_tokens: int
    choice: ModelChoice | None
    error: str | None = None


def pages() -> list[st.Page]:
    """Every page of the app, in menu order."""
    return [
        st.Page("pages/overview.py", title="Overview", icon="🏠", default=True),
        st.Page("pages/heads.py", title="Heads", icon="🧠"),
        st.Page("pages/parity.py", title="Parity", icon="⚖️"),
        st.Page("pages/generation.py", title="Generation", icon="✍️"),
        st.Page("pages/padding.py", title="Padding", icon="🧱"),
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
    if PagesManager.uses_pages_directory:
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
    st.session_state.text = EXAMPLES[st.session_state.example]


def sidebar() -> Settings:
    """Draw the shared sidebar and return the settings it holds."""
    init_state()
    with st.sidebar:
        st.header("Text")
        st.selectbox("Example", list(EXAMPLES), key="example", on_change=_use_example)
        st.text_area("Text to analyse", key="text", height=110)
        st.number_input("Max tokens", min_value=1, max_value=MAX_TOKENS_LIMIT, step=16, key="max_tokens")

        st.header("Model")
        st.selectbox("Model", list(MODEL_CHOICES), key="model", format_func=MODEL_CHOICES.get)
        if st.session_state.model == "path":
            st.text_input("Model folder or hub id", key="model_path", placeholder="/path/to/model or org/name")
        with st.expander("Embedded model settings", expanded=st.session_state.model == "default"):
            st.caption("attnviz's own attention with seeded random weights.")
            cols = st.columns(2)
            cols[0].number_input("d_model", min_value=2, max_value=1024, step=2, key="d_model")
            cols[1].number_input("n_head", min_value=1, max_value=64, key="n_head")
            cols[0].number_input(
                "n_kv_head", min_value=0, max_value=64, key="n_kv_head", help="0 = same as n_head (MHA)"
            )
            cols[1].number_input("n_layer", min_value=1, max_value=12, key="n_layer")
            cols[0].number_input("seed", min_value=0, max_value=2**31 - 1, key="seed")
            cols[1].checkbox("causal", key="causal", help="decoder-style: no attending to later tokens")

        st.header("Device")
        st.selectbox("Device", DEVICE_CHOICES, key="device")
        try:
            device = resolve_device(st.session_state.device)
            st.caption(f"Running on **{device}**")
        except ValueError as err:
            st.error(str(err))
            device = resolve_device("auto")

        choice, error = None, None
        source = st.session_state.model
        try:
            if source == "default":
                config = EmbeddedConfig(
                    d_model=int(st.session_state.d_model),
                    n_head=int(st.session_state.n_head),
                    n_kv_head=int(st.session_state.n_kv_head) or None,
                    n_layer=int(st.session_state.n_layer),
                    seed=int(st.session_state.seed),
                    causal=bool(st.session_state.causal),
                )
                choice = ModelChoice("default", device, config)
            elif source == "path":
                path = st.session_state.model_path.strip()
                if not path:
                    raise ValueError("type the path of a local Hugging Face model folder (or a hub id)")
                choice = ModelChoice(path, device, allow_pickle=ALLOW_PICKLE)
            else:
                choice = ModelChoice(source, device)
        except ValueError as err:
            error = f"Invalid model settings: {err}"
            st.error(error)
    return Settings(
        text=st.session_state.text,
        max_tokens=int(st.session_state.max_tokens),
        choice=choice,
        error=error,
    )


@st.cache_resource(max_entries=8, show_spinner=False)
def load_source(choice: ModelChoice) -> EmbeddedModel | HFModel:
    """One model per choice, loaded once per process and shared read-only by every session."""
    if choice.embedded:
        return EmbeddedModel(choice.config).to(choice.device)
    return load_model(choice.source, choice.device, allow_pickle=choice.allow_pickle)


def source_for(choice: ModelChoice) -> EmbeddedModel | HFModel | None:
    """The loaded model, with progress while it loads; None after showing why it cannot load."""
    try:
        if choice.source == "smollm2" and not is_converted(converted_dir(smollm2_gguf())):
            with st.status("Preparing SmolLM2 (once per machine)…", expanded=True) as status:
                bar = st.progress(0.0, text="Starting")
                convert_gguf(smollm2_gguf(), progress=lambda f, msg: bar.progress(f, text=msg))
                status.update(label="SmolLM2 is ready", state="complete", expanded=False)
        with st.spinner(f"Loading {MODEL_CHOICES.get(choice.source, choice.source)}…"):
            return load_source(choice)
    except ModelUnavailableError as err:
        st.error(str(err))
        return None


@st.cache_data(max_entries=16, show_spinner="Computing attention…")
def compute_record(choice: ModelChoice, text: str, max_tokens: int) -> AttentionRecord:
    return load_source(choice).run(text, max_tokens)


@st.cache_data(max_entries=8, show_spinner="Running the batch…")
def compute_batch(choice: ModelChoice, texts: tuple[str, ...], max_tokens: int, side: str) -> BatchRecord:
    return load_source(choice).run_batch(list(texts), max_tokens, side)


@st.cache_data(max_entries=8, show_spinner="Generating…")
def compute_generation(choice: ModelChoice, prompt: str, n_new: int, max_tokens: int) -> GenerationRecord:
    return load_source(choice).generate(prompt, n_new, max_tokens)


@st.cache_data(max_entries=8, show_spinner="Running our attention on the model's layers…")
def compute_parity(choice: ModelChoice, text: str, max_tokens: int) -> Parity:
    model = load_source(choice)
    ids, _, _ = model.encode(text, max_tokens)
    return reproduce(model, ids)


def current_model(settings: Settings) -> EmbeddedModel | HFModel | None:
    """The sidebar's model, loaded; None after telling the user why not."""
    if settings.error or settings.choice is None:
        st.error(settings.error or "Choose a model in the sidebar.")
        return None
    return source_for(settings.choice)


def current_record(settings: Settings) -> AttentionRecord | None:
    """The record for the sidebar's settings, or None after telling the user why not."""
    if current_model(settings) is None:
        return None
    if not settings.text.strip():
        st.info("Type some text in the sidebar (or pick an example) to see its attention.")
        return None
    record = compute_record(settings.choice, settings.text, settings.max_tokens)
    if not record.tokens:
        st.info("That text has no tokens to attend to. Try some words.")
        return None
    if record.truncated:
        why = (
            "raise **Max tokens** in the sidebar to see more"
            if len(record.tokens) >= settings.max_tokens
            else f"this model reads at most {len(record.tokens)} tokens"
        )
        st.warning(
            f"The text has {record.n_input_tokens} tokens; only the first {len(record.tokens)} are shown ({why})."
        )
    return record


def layer_head_picker(n_layer: int, n_head: int, key: str, with_mean: bool = True) -> tuple[int, int | str]:
    """Two selectboxes side by side: a layer and a head (or "mean")."""
    cols = st.columns(2)
    layer = cols[0].selectbox("Layer", range(n_layer), key=f"{key}_layer", format_func=lambda i: f"L{i}")
    heads = [*range(n_head), "mean"] if with_mean else list(range(n_head))
    head = cols[1].selectbox(
        "Head", heads, key=f"{key}_head", format_func=lambda h: "mean over heads" if h == "mean" else f"H{h}"
    )
    return layer, head


def plotly(fig: go.Figure, key: str) -> None:
    """Render a figure at full width with a stable key."""
    st.plotly_chart(fig, key=key, width="stretch", config={"displaylogo": False})

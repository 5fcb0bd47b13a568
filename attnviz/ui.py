"""Streamlit glue: the shared sidebar, cached model and record loaders, friendly errors.

This is the one module of the library that imports Streamlit. Pages call
:func:`current_record` and get an :class:`AttentionRecord` (or a message has
already been shown and they stop), so no page deals with models, caching or
bad input itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go
import streamlit as st

from attnviz.devices import DEVICE_CHOICES, resolve_device
from attnviz.embedded import EmbeddedConfig, EmbeddedModel
from attnviz.record import AttentionRecord

EXAMPLES = {
    "English: the cat": "The cat sat on the mat because it was tired.",
    "English: pronouns": "The trophy did not fit in the suitcase because it was too big.",
    "中文: 猫": "猫坐在垫子上，因为它累了。",
    "中文: 注意力": "注意力机制让每个词都能看到句子里的其他词。",
    "Mixed 中英 + emoji": "Attention 注意力 is all you need 👍🏽!",
}
MAX_TOKENS_LIMIT = 2048

DEFAULTS = {
    "text": EXAMPLES["English: the cat"],
    "example": "English: the cat",
    "device": "auto",
    "max_tokens": 256,
    "d_model": 64,
    "n_head": 4,
    "n_kv_head": 0,
    "n_layer": 2,
    "seed": 0,
    "causal": False,
}


@dataclass(frozen=True)
class Settings:
    """What the sidebar asks for; ``error`` says why the model settings are invalid."""

    text: str
    max_tokens: int
    device: str
    config: EmbeddedConfig | None
    error: str | None = None


def pages() -> list[st.Page]:
    """Every page of the app, in menu order."""
    return [
        st.Page("pages/overview.py", title="Overview", icon="🏠", default=True),
        st.Page("pages/heads.py", title="Heads", icon="🧠"),
    ]


def frame_settings() -> Settings:
    """The sidebar's settings, as app.py's frame stored them for this run.

    A first visit straight to a page's URL (a shared link) runs that page alone:
    a ``pages/`` folder puts Streamlit in its legacy multipage mode until
    ``st.navigation`` has run once in the process. Calling it here switches the
    mode off, and the rerun goes through app.py, sidebar included.
    """
    settings = st.session_state.get("settings")
    if settings is None:
        st.navigation(pages(), position="hidden")
        st.rerun()
    return settings


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
        st.caption("Embedded default: attnviz's own attention with seeded random weights.")
        cols = st.columns(2)
        cols[0].number_input("d_model", min_value=2, max_value=1024, step=2, key="d_model")
        cols[1].number_input("n_head", min_value=1, max_value=64, key="n_head")
        cols[0].number_input("n_kv_head", min_value=0, max_value=64, key="n_kv_head", help="0 = same as n_head (MHA)")
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

        config, error = None, None
        try:
            config = EmbeddedConfig(
                d_model=int(st.session_state.d_model),
                n_head=int(st.session_state.n_head),
                n_kv_head=int(st.session_state.n_kv_head) or None,
                n_layer=int(st.session_state.n_layer),
                seed=int(st.session_state.seed),
                causal=bool(st.session_state.causal),
            )
        except ValueError as err:
            error = f"Invalid model settings: {err}"
            st.error(error)
    return Settings(
        text=st.session_state.text,
        max_tokens=int(st.session_state.max_tokens),
        device=device,
        config=config,
        error=error,
    )


@st.cache_resource(max_entries=8, show_spinner="Building the model…")
def load_embedded(config: EmbeddedConfig, device: str) -> EmbeddedModel:
    """One model per configuration and device, shared read-only by every session."""
    return EmbeddedModel(config).to(device)


@st.cache_data(max_entries=32, show_spinner="Computing attention…")
def embedded_record(config: EmbeddedConfig, text: str, max_tokens: int, device: str) -> AttentionRecord:
    return load_embedded(config, device).run(text, max_tokens)


def current_record(settings: Settings) -> AttentionRecord | None:
    """The record for the sidebar's settings, or None after telling the user why not."""
    if settings.error:
        st.error(settings.error)
        return None
    if not settings.text.strip():
        st.info("Type some text in the sidebar (or pick an example) to see its attention.")
        return None
    record = embedded_record(settings.config, settings.text, settings.max_tokens, settings.device)
    if not record.tokens:
        st.info("That text has no tokens to attend to. Try some words.")
        return None
    if record.truncated:
        st.warning(
            f"The text has {record.n_input_tokens} tokens; only the first {len(record.tokens)} are shown "
            f"(raise **Max tokens** in the sidebar to see more)."
        )
    return record


def plotly(fig: go.Figure, key: str) -> None:
    """Render a figure at full width with a stable key."""
    st.plotly_chart(fig, key=key, width="stretch", config={"displaylogo": False})

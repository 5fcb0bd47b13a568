"""Session state: the sidebar's defaults, the settings it hands every page, and widget values kept valid.

Shared inputs (text, model, device) live in app.py's frame; a page reads them as :class:`Settings`. Widget
values that follow the text, the model or the record's shape are kept to what the widgets offer
(:func:`valid_choice`), and a language switch keeps every choice (:func:`pin_choices`).
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st
from streamlit.errors import StreamlitAPIException

from attnviz import settings
from attnviz.app.in_process import opening
from attnviz.i18n.message import Text
from attnviz.models.registry import EMBEDDED, SourceSpec

DEFAULTS = {
    "text": settings.DEFAULT_TEXT,
    "example": settings.DEFAULT_EXAMPLE,
    "device": "auto",
    "dtype": "auto",
    "device_map": "none",
    "max_memory": "",
    "offload_folder": "",
    "model": EMBEDDED,
    "model_path": "",
    "max_tokens": settings.MAX_TOKENS.default,
    "d_model": settings.D_MODEL.default,
    "n_head": settings.N_HEAD.default,
    "n_kv_head": settings.N_KV_HEAD.default,
    "n_layer": settings.N_LAYER.default,
    "seed": settings.SEED.default,
    "causal": False,
    "target": "",  # an encoder-decoder's target: typed, or written by the model (the default)
    "target_from": "generated",
    "n_generate": settings.TARGET_GENERATED,
}


@dataclass(frozen=True)
class Settings:
    """What the sidebar asks for; ``error`` says why the model settings are invalid."""

    text: str
    max_tokens: int
    spec: SourceSpec | None
    error: Text | None = None

    def key(self, max_tokens: int | None = None) -> tuple:
        """What determines a record: the source, the text and the token limit."""
        return (self.spec, self.text, self.max_tokens if max_tokens is None else max_tokens)


SHARED_INPUTS = (*DEFAULTS, "lang")  # the sidebar's widgets (and an encoder-decoder's target): every page's context
_KEPT = "_shared_inputs_kept"  # a plain session value: Streamlit's clean-up of widget values leaves it alone


def keep_shared_inputs() -> None:
    """Keep the shared inputs across an ``st.switch_page`` made by the script (a click that opens another page).

    Such a switch reruns on the new page without the browser's widget states, and Streamlit then drops every
    widget's value as stale before the new page runs: the sidebar's text, model and settings would come back as
    their defaults (a ranked head 23.3 of SmolLM2 opened as 0.3 of the embedded model). They are copied here to a
    plain session value, which :func:`init_state` puts back before the sidebar draws its widgets."""
    st.session_state[_KEPT] = {key: st.session_state[key] for key in SHARED_INPUTS if key in st.session_state}


def init_state() -> None:
    for key, value in st.session_state.pop(_KEPT, {}).items():  # a switch made by the script: its inputs come back
        st.session_state[key] = value
    for key, value in {**DEFAULTS, **opening()}.items():  # opening: a notebook's model and text (open_in_app)
        if key not in st.session_state:
            st.session_state[key] = value


def pin_choices() -> None:
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


def offered(value, options) -> bool:
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
        kept = [v for v in value if offered(v, options)]
        if len(kept) != len(value):
            st.session_state[key] = kept
    elif key not in st.session_state or not offered(value, options):
        st.session_state[key] = default

"""Links: the address bar always holds the view, and a link opens it.

``?text=&model=&max_tokens=`` (and the embedded model's settings when they are not the defaults, an
encoder-decoder's ``?target=`` or ``?generate=N``, and a local folder's ``?model=path&path=`` on a server that is
not hosted) are the sidebar's; a page keeps its own ``?layer=&head=``. What a link holds is data: a value the app
does not offer is ignored with a note, and the text only fills the text box.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from attnviz import settings
from attnviz.app.hosted import model_options
from attnviz.app.state import DEFAULTS, offered
from attnviz.core.token_display import markdown_text, visible_text
from attnviz.i18n.translate import t
from attnviz.models.registry import EMBEDDED

LINK_TEXT_CHARS = 500  # a longer text stays out of the link (URLs that long break in chats and mail)
SHOWN_PATH_CHARS = 80  # a link's folder named in a note: its start
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
    if model == "path":
        ignored += _read_folder(query.get("path"))
    elif model is not None:
        if model in model_options():
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
    target, generate = query.get("target"), query.get("generate")
    if target is not None:  # an encoder-decoder's target, typed: data, like the text
        if len(target) <= LINK_TEXT_CHARS:
            st.session_state.target, st.session_state.target_from = target, "typed"
        else:
            ignored.append("target")
    elif generate is not None:
        if generate.isascii() and generate.isdigit() and 1 <= int(generate) <= settings.MAX_TARGET_GENERATED:
            st.session_state.n_generate, st.session_state.target_from = int(generate), "generated"
        else:
            ignored.append("generate")
    if (causal := query.get("causal")) is not None:
        if causal in ("0", "1"):
            st.session_state.causal = causal == "1"
        else:
            ignored.append("causal")
    return ignored


def _read_folder(folder: str | None) -> list[str]:
    """A link's ?model=path&path=<folder>: opened only by a server on the reader's own machine (not hosted: a
    hosted server never opens a path it is handed, and says only what it says of any model it does not offer) and
    only when it is a folder there, as a refresh of a page on a local folder model gives it back. Returns what was
    ignored; says why in a caption on a local server."""
    if "path" not in model_options():  # hosted: the same words as any model it does not offer, nothing to probe
        return ["model"]
    if not folder or len(folder) > LINK_TEXT_CHARS or not Path(folder).is_dir():
        shown = folder or ""
        shown = shown if len(shown) <= SHOWN_PATH_CHARS else shown[:SHOWN_PATH_CHARS] + "…"
        st.sidebar.caption(t("link_folder.not_a_folder", path=markdown_text(visible_text(shown))))
        return ["model"]
    st.session_state.model, st.session_state.model_path = "path", folder
    return []


def link_values() -> tuple[dict[str, str], bool]:
    """What the link carries for the sidebar's current values (defaults left out), and whether the text is too long."""
    state, values = st.session_state, {}
    long_text = len(state.text) > LINK_TEXT_CHARS
    if state.text != DEFAULTS["text"] and not long_text:
        values["text"] = state.text
    if state.model != DEFAULTS["model"] and state.model != "path":
        values["model"] = state.model
    folder = state.get("model_path", "").strip()
    if state.model == "path" and folder and len(folder) <= LINK_TEXT_CHARS and "path" in model_options():
        values["model"], values["path"] = "path", folder  # a local server's own folder: a refresh keeps it
    for name in ("max_tokens", *LINK_EMBEDDED):
        if name in LINK_EMBEDDED and state.model != EMBEDDED:
            continue
        if state.get(name, DEFAULTS[name]) != DEFAULTS[name]:
            values[name] = str(int(state[name]))
    if state.get("target_from", DEFAULTS["target_from"]) == "typed":
        if state.get("target") and len(state.target) <= LINK_TEXT_CHARS:
            values["target"] = state.target
    elif state.get("n_generate", DEFAULTS["n_generate"]) != DEFAULTS["n_generate"]:
        values["generate"] = str(int(state.n_generate))
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
    for name in ("text", "model", "path", *LINK_NUMBERS, "causal", "target", "generate"):
        if name not in values and name in st.query_params:
            del st.query_params[name]
        elif name in values and st.query_params.get(name) != values[name]:
            st.query_params[name] = values[name]
    if long_text:
        st.sidebar.caption(t("links.text_too_long", limit=LINK_TEXT_CHARS))


def linked_choice(name: str, options):
    """The link's ?<name>= as one of ``options`` (an int, or "mean"), or None when it is not one of them."""
    value = st.query_params.get(name)
    if value is None:
        return None
    if value != "mean":
        try:
            value = int(value)
        except ValueError:
            return None
    return value if offered(value, options) else None


def link_layer_head(key: str, layers, heads) -> None:
    """On this page's first run in the session, open the link's ?layer=&head= (in ``<key>_layer``/``<key>_head``).

    The one way a page reads its head from a link. Call it before the pickers; then
    :func:`keep_layer_head_in_link` after them. The link opens its head only when every value it gives is one
    the page offers; each one that is not is named in a caption, and nothing is opened.
    """
    if f"{key}_link_read" in st.session_state:
        return
    st.session_state[f"{key}_link_read"] = True
    given = {name: options for name, options in (("layer", layers), ("head", heads)) if name in st.query_params}
    chosen = {name: linked_choice(name, options) for name, options in given.items()}
    for name, value in chosen.items():
        if value is None:
            st.caption(t("links.bad_choice", name=name))
    if None not in chosen.values():
        for name, value in chosen.items():
            st.session_state[f"{key}_{name}"] = value


def keep_layer_head_in_link(layer: int, head) -> None:
    """Write the page's layer and head to the link (only when they changed: each write is a message)."""
    if st.query_params.get("layer") != str(layer) or st.query_params.get("head") != str(head):
        st.query_params.update(layer=str(layer), head=str(head))

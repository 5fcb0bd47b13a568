"""Token search: type a word or piece, see where it occurs with context, pick one to go there.

Picking an occurrence sets the session's focus token (``focus_token``) and bumps ``focus_token_serial``; each
page that follows the focus (Heads, Token view, Mask lab) compares that serial with the one it last applied
(:func:`new_focus`) and moves its own widgets there before it draws them.
"""

from __future__ import annotations

import streamlit as st

from attnviz.core.token_display import markdown_text
from attnviz.core.token_search import MAX_QUERY_CHARS, Occurrence, find_tokens
from attnviz.core.tokenizer import Token
from attnviz.i18n.translate import t
from attnviz.models.record import short_text

FOCUS = "focus_token"
FOCUS_SERIAL = "focus_token_serial"
CONTEXT_CHARS = 24  # a context token is cut to this many characters in the list
SCROLL_AFTER = 6  # more occurrences than this are listed in a scrolling box


def focus_token() -> int | None:
    """The token the user last picked in a search, on any page (None before the first pick)."""
    return st.session_state.get(FOCUS)


def set_focus(index: int) -> None:
    """Make token ``index`` the session's focus, as picking it in a search does."""
    st.session_state[FOCUS] = int(index)
    st.session_state[FOCUS_SERIAL] = st.session_state.get(FOCUS_SERIAL, 0) + 1


def new_focus(key: str) -> int | None:
    """The focus token if it was picked since the page under ``key`` last applied it, else None (once per pick)."""
    serial = st.session_state.get(FOCUS_SERIAL, 0)
    if st.session_state.get(f"{key}_focus_serial") == serial:
        return None
    st.session_state[f"{key}_focus_serial"] = serial
    return focus_token() if serial else None


def occurrence_label(occurrence: Occurrence) -> str:
    """One occurrence for a button: its position, the matched tokens in bold between their context, escaped."""

    def shown(texts: tuple[str, ...]) -> str:
        return " ".join(markdown_text(short_text(text, CONTEXT_CHARS)) for text in texts)

    parts = [
        "… " if occurrence.cut_before else "",
        shown(occurrence.before) + " " if occurrence.before else "",
        f"**{shown(occurrence.matched)}**",
        " " + shown(occurrence.after) if occurrence.after else "",
        " …" if occurrence.cut_after else "",
    ]
    return t("search.occurrence", index=occurrence.index, context="".join(parts))


def token_search(tokens: list[Token], key: str) -> None:
    """A search box over ``tokens`` and the occurrences it finds; a click on one makes it the focus token."""
    cols = st.columns([4, 1], vertical_alignment="bottom")
    query = cols[0].text_input(
        t("search.label"),
        key=f"{key}_query",
        max_chars=MAX_QUERY_CHARS,
        placeholder=t("search.placeholder"),
        help=t("search.help"),
    )
    match_case = cols[1].toggle(t("search.match_case"), key=f"{key}_case")
    result = find_tokens(tokens, query or "", match_case=match_case)
    if result.query_cut or len(query or "") >= MAX_QUERY_CHARS:  # the box itself cuts a longer paste, silently
        st.caption(t("search.query_cut", n=MAX_QUERY_CHARS))
    if not result.query:
        return
    typed = markdown_text(" ".join((query or "")[:MAX_QUERY_CHARS].split()))
    if not result.total:
        st.info(t("search.no_match", query=typed))
        return
    listed = len(result.occurrences)
    if listed < result.total:
        st.caption(t("search.found_some", total=result.total, query=typed, listed=listed))
    elif result.total == 1:
        st.caption(t("search.found_one", query=typed))
    else:
        st.caption(t("search.found", total=result.total, query=typed))
    box = st.container(height=260) if listed > SCROLL_AFTER else st.container()
    for occurrence in result.occurrences:
        box.button(
            occurrence_label(occurrence),
            key=f"{key}_go_{occurrence.index}_{occurrence.stop}",
            on_click=set_focus,
            args=(occurrence.index,),
            type="tertiary",
        )
    focus = focus_token()
    if focus is not None and focus < len(tokens):
        st.caption(t("search.focused", index=focus, token=markdown_text(short_text(tokens[focus].text, CONTEXT_CHARS))))

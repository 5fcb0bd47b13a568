"""The page list and the way into it: every page in its section, titled in the reader's language."""

from __future__ import annotations

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager

from attnviz.app.state import Settings
from attnviz.i18n.translate import t

# the menu, in order: each section's key in the catalogue's [nav_sections], then its pages: the file name in
# pages/ (and its key in the catalogue's [nav]) -> icon
SECTIONS = {
    "attention": {
        "overview": "🏠",
        "tour": "🧭",
        "heads": "🧠",
        "tokens": "🔤",
        "head_roles": "🧩",
        "corpus": "📚",
        "generation": "✍️",
        "padding": "🧱",
        "ablation": "✂️",
        "patching": "🩹",
        "rollout": "🌊",
        "compare": "🆚",
    },
    "labs": {
        "walkthrough": "🪜",
        "scaling": "📐",
        "training": "📉",
        "masks": "🎭",
        "parity": "⚖️",
    },
    "engineering": {
        "kv_cache": "🗄️",
        "cost": "⏱️",
    },
}


HOME = "overview"  # the default page: a link of its own at the menu's start, before the sections' drop-downs
# The menu sits in the page's header, a drop-down a section: in the sidebar its 16 entries pushed the text and the
# model below a 1,000-px screen (issue 25). On a narrow screen Streamlit moves it into the sidebar itself.
MENU_POSITION = "top"


def pages() -> dict[str, list[st.Page]]:
    """Every page of the app in its section, in menu order, titled in the reader's language; the home page first,
    under no section (``""``: in the header's menu, a link of its own)."""
    menu: dict[str, list[st.Page]] = {"": []}
    for section, section_pages in SECTIONS.items():
        for name, icon in section_pages.items():
            page = st.Page(f"pages/{name}.py", title=t(f"nav.{name}"), icon=icon, default=name == HOME)
            menu.setdefault("" if name == HOME else t(f"nav_sections.{section}"), []).append(page)
    return menu


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
        _through_the_frame()


def _through_the_frame() -> None:
    """Rerun on the page the visitor asked for, through app.py's frame (``st.navigation`` resolves it)."""
    # the link's query parameters (?lang=, ?layer=) go along: switch_page would clear them
    st.switch_page(st.navigation(pages(), position="hidden"), query_params=st.query_params.to_dict())


def frame_settings() -> Settings:
    """The sidebar's settings, as app.py's frame stored them for this run.

    A first visit straight to a page's URL on a fresh server runs that page file
    alone (legacy mode, see :func:`leave_legacy_multipage_mode`); the rerun goes
    through app.py, sidebar included. So does a page file that ran without the
    frame after another session left legacy mode in the meantime: Streamlit chose
    the legacy route for this run before the flag changed (two first visitors at
    once on a fresh server, or a session that moved to another replica).
    """
    leave_legacy_multipage_mode()
    if "settings" not in st.session_state:
        _through_the_frame()
    return st.session_state["settings"]

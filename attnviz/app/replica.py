"""Replicas: a session that moved to this server because the one that held it stopped.

Streamlit keeps a session (its state, its websocket) in the process that served it. Behind nginx
(``deploy/replicas.py``), when that replica stops, the browser reconnects through the proxy to another one, which
does not know the session and starts a new one. That new session rebuilds the view from the link (the sidebar's
first run reads ``?text=&model=...``, a page its ``?layer=&head=``: :mod:`attnviz.app.links`); this module
tells the visitor so.

Two signals, both from the websocket handshake that opened the session (``st.context``):
- the cookie nginx sets on the upgrade response only (:data:`attnviz.settings.REPLICA_COOKIE`), naming the
  replica that answered it: it names another replica than this one (:data:`attnviz.settings.REPLICA_ENV`);
- the browser asked to resume a session (the third entry of ``Sec-WebSocket-Protocol`` is the session id it held),
  so this is a reconnection and not a fresh page load with an old cookie.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import streamlit as st

from attnviz import settings
from attnviz.app.grid_canvas import map_report_due
from attnviz.app.widgets import show_info
from attnviz.i18n.message import msg

CHECKED = "replica_checked"  # session_state: the session's first run has looked
MOVED = "replica_moved"  # session_state: ... and found the session moved here
RERUN_TIMER_S = 86_400  # a day: the fragment below is registered for its timer, not to run


def resumed_session_id(protocols: str | None) -> str | None:
    """The session id a reconnecting browser asks to resume: the third comma-separated entry of its
    ``Sec-WebSocket-Protocol`` header (``streamlit, <xsrf token>, <session id>``), or None on a first connection."""
    entries = [entry.strip() for entry in (protocols or "").split(",")]
    return entries[2] if len(entries) >= 3 and entries[2] else None


def moved_from(cookies: Mapping[str, str], headers: Mapping[str, str], own: str | None) -> str | None:
    """The replica a session came from, or None when it did not move.

    ``own`` is this replica's name (None or "" when the server is no replica). It moved when the handshake's
    cookie names another replica and the browser asked to resume a session: this process has none, since a
    session it has keeps its state and never starts again.
    """
    previous = cookies.get(settings.REPLICA_COOKIE, "")
    if not own or not previous or previous == own:
        return None
    if resumed_session_id(headers.get("Sec-WebSocket-Protocol")) is None:
        return None
    return previous


@st.fragment(run_every=RERUN_TIMER_S)
def _reconnect_rerun() -> None:
    """Draws nothing and does nothing. Streamlit's browser client reruns the script when it reconnects only while
    an auto-rerun fragment is registered (else it waits for the visitor's next click): this one's timer makes a
    session that moved to another replica rebuild itself, and say so, as soon as it reconnects."""


def note_moved_session() -> None:
    """On a session's first run, say so when it moved here from a replica that stopped (its view rebuilt from the
    link, its results computed again). Call it in app.py after the sidebar, which reads the link, on every run.
    Does nothing on a server that is no replica (:data:`attnviz.settings.REPLICA_ENV` unset)."""
    own = os.environ.get(settings.REPLICA_ENV, "").strip()
    if not own:
        return
    with st.sidebar:
        _reconnect_rerun()
    if CHECKED in st.session_state:
        # the run the grid's first drawing starts (attnviz.app.grid_canvas) is the app's, not the visitor's: the
        # note stays until the visitor's own next run
        if st.session_state.get(MOVED) and map_report_due():
            show_info(msg("replicas.moved"))
        return
    st.session_state[CHECKED] = True
    moved = moved_from(st.context.cookies, st.context.headers, own) is not None
    st.session_state[MOVED] = moved
    if moved:
        show_info(msg("replicas.moved"))

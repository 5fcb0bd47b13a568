"""Work that is running, said while it runs; what the previous run drew, never shown as if current.

Streamlit keeps every element of the previous run on the screen, faded, until the new run draws its place again
(or ends): during a slow rerun the old results below the point the script has reached, a red error among them,
stay readable, and the only sign of work is a small icon in the header (issue 37: 23-28 s a change in the Mask
lab on a busy machine, 47 s for the lines view). So every page, through :func:`page_run` (app.py's
``run_page``), gets two things:

- a banner fixed at the top of the window, "Working: <what>", put in its place as the run starts and removed as it
  ends. The browser shows it only once the run has lasted :data:`SHOW_AFTER_S` (a run of a few tenths of a second
  flickers nothing), and a computation that may take longer names itself in it (:func:`working`, which the cached
  computations of :mod:`attnviz.app.loading` use), with its spinner or progress bar in place as before;
- a style rule that hides an element of the previous run still on the screen once the run has lasted as long
  (Streamlit marks those ``data-stale="true"``): the part of the page not yet redrawn is blank, its place kept
  (the page does not jump), instead of faded but readable.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import streamlit as st

from attnviz.i18n.translate import t

SHOW_AFTER_S = 1.0  # a run shorter than this shows neither the banner nor a blank: nothing flickers

BANNER_CLASS = "attnviz-working"

# The banner over the page, under Streamlit's header; its delay is set on the element, by how long the run has
# lasted when it was drawn. The previous run's elements: Streamlit fades them at once, this hides them once the
# run has lasted SHOW_AFTER_S (a transition's delay applies when the state is entered; redrawn, an element shows
# at once).
STYLE = f"""
.{BANNER_CLASS} {{
  position: fixed; top: 3.75rem; left: 50%; transform: translateX(-50%); z-index: 999990;
  max-width: min(90vw, 48rem); padding: 0.45rem 1.1rem; border-radius: 0.5rem;
  background: #fff4d6; color: #31333f; border: 1px solid #e0b040; box-shadow: 0 2px 10px rgba(0, 0, 0, 0.18);
  opacity: 0; animation: attnviz-working-show 0s linear forwards;
}}
.{BANNER_CLASS} p {{ margin: 0; }}
@keyframes attnviz-working-show {{ to {{ opacity: 1; }} }}
[data-testid="stElementContainer"][data-stale="true"] {{
  visibility: hidden; transition: visibility 0s linear {SHOW_AFTER_S:g}s;
}}
"""

_run = threading.local()  # this session's run (a script runs in its own thread): the banner's place and its start


def banner_markdown(what: str, delay_s: float) -> str:
    """The banner's Markdown (HTML around it): "Working: ``what``" (Markdown, its data escaped), shown after
    ``delay_s`` seconds. The blank lines let Markdown read ``what`` inside the HTML block; a ``<`` in ``what`` that
    Markdown escaping left as it is becomes an entity, so no tag in it is ever read as HTML here."""
    what = re.sub(r"(?<!\\)<", "&lt;", what)
    return (
        f'<div class="{BANNER_CLASS}" role="status" style="animation-delay: {delay_s:.2f}s">\n\n'
        f"{t('running.banner', what=what)}\n\n</div>"
    )


def _show(what: str) -> None:
    slot = getattr(_run, "slot", None)
    if slot is None:  # no page run around this (a test's script, a job's thread): the spinner in place says it
        return
    delay = max(0.0, SHOW_AFTER_S - (time.monotonic() - _run.start))
    slot.markdown(banner_markdown(what, delay), unsafe_allow_html=True)


@contextmanager
def page_run() -> Iterator[None]:
    """Around one run of a page: the style rule, the banner's place at the top (saying "updating the page" until a
    computation names itself), and the banner gone when the run ends, however it ends."""
    st.html(f"<style>{STYLE}</style>")  # style alone: Streamlit puts it in no place on the page
    slot = st.empty()
    _run.slot, _run.start, _run.what = slot, time.monotonic(), None
    _show(t("running.page"))
    try:
        yield
    finally:
        _run.slot = None
        slot.empty()


@contextmanager
def working(what: str, inner: AbstractContextManager | None = None) -> Iterator[Any]:
    """Around a computation that may take over a second: the banner names it (``what``, Markdown in the reader's
    words, its data escaped), and in place a spinner (or ``inner``, a progress bar, whose handle is yielded) says it
    too. After it the banner says what it said before."""
    before = getattr(_run, "what", None)
    _run.what = what
    _show(what)
    try:
        with st.spinner(what) if inner is None else inner as handle:
            yield handle
    finally:
        _run.what = before
        _show(before or t("running.page"))

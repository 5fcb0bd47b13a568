"""A long job's progress bar: what it is doing, step counts, the time spent and the time left, cleared when done.

The library reports through :class:`~attnviz.core.progress.Progress`; this module
draws it with ``st.progress``, as "Capturing attention… · Layer 12 of 30 · 41 s
elapsed · about 55 s left", in the reader's language. The time left is the
reporter's estimate from the steps this machine has done (never a constant), and
reads "estimating…" until the first step.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from attnviz.core.progress import Progress, ProgressState
from attnviz.core.time_agreement import TimeVerdict
from attnviz.i18n.translate import t, tr

DRAW_EVERY_S = 0.1  # a bar redrawn at most this often (each redraw is a message to the browser); the last always


def duration_text(seconds: float) -> str:
    """``seconds`` as "41 s", or "2 min 05 s" from 90 s on, in the reader's language."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return t("progress.seconds", n=seconds)
    whole = round(seconds)
    return t("progress.minutes", m=whole // 60, s=whole % 60)


def progress_text(title: str, state: ProgressState) -> str:
    """One line for the bar: the job, its stage's counts, the elapsed time and the estimate (or "estimating…")."""
    parts = [title]
    parts.append(t(state.label, **state.values) if state.label else t("progress.starting"))
    parts.append(t("progress.elapsed", time=duration_text(state.elapsed_s)))
    if state.remaining_s is None:
        parts.append(t("progress.estimating"))
    else:
        parts.append(t("progress.left", time=duration_text(state.remaining_s)))
    return " · ".join(parts)


@contextmanager
def progress_bar(title: str, clock=time.perf_counter) -> Iterator[Progress]:
    """A :class:`Progress` whose steps draw a bar titled ``title`` (already in the reader's words); the bar is
    removed when the block ends, however it ends."""
    slot = st.empty()
    bar = slot.progress(0.0, text=f"{title} · {t('progress.estimating')}")
    drawn = {"at": -float("inf")}

    def draw(state: ProgressState) -> None:
        now = clock()
        last = state.stage == state.n_stages and state.done >= state.total
        if now - drawn["at"] < DRAW_EVERY_S and not last:
            return
        drawn["at"] = now
        bar.progress(min(1.0, max(0.0, state.fraction)), text=progress_text(title, state))

    try:
        yield Progress(on_update=draw, clock=clock)
    finally:
        slot.empty()


def time_note(verdict: TimeVerdict | None) -> None:
    """A job's predicted time beside the time it took (:func:`attnviz.core.time_agreement.time_verdict`): a caption
    when they agree within the bound, an info box that says why when they do not; nothing when no part ended."""
    if verdict is None:
        return
    (st.caption if verdict.agrees else st.info)(tr(verdict.message))

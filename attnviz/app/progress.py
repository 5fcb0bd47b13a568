"""A long job's progress bar: what it is doing, step counts, the time spent and the time left, cleared when done.

The library reports through :class:`~attnviz.core.progress.Progress`; this module
draws it with ``st.progress``, as "Capturing attention… · Layer 12 of 30 · 41 s
elapsed · about 55 s left", in the reader's language. The time left is the
reporter's estimate from the steps this machine has done (never a constant), and
reads "estimating…" until the first step.

A job the page quoted before it ran (the sweep, exact patching) is priced the same way on its button and on its bar:
:func:`quote` takes the lab's price, timed when its first passes ran, and scales it by the machine as it is now: by
the job's own last passes when a stopped run left some (Continue prices what is left at the speed it was going), or
else by a fresh short probe (:func:`attnviz.core.device_speed.current_probe`, at most 3 s old) against the probe
taken when the price was timed (:func:`probed`), so a price timed on a quiet machine is not quoted on a busy one.
A fresh probe, not a pass re-timed: a pass costs up to 2 s on every rerun of the page, a probe about 0.15 s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from attnviz.core.device_speed import current_probe, load_factor
from attnviz.core.progress import Progress, ProgressState
from attnviz.core.time_agreement import Lap, Price, TimeVerdict, price_left
from attnviz.i18n.translate import t, tr

DRAW_EVERY_S = 0.1  # a bar redrawn at most this often (each redraw is a message to the browser); the last always
PROBED_KEPT = 64  # the probes kept beside the prices they were taken with (a price evicted and timed again is probed)
_probed: dict[tuple, float] = {}


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
    elif state.basis == "recent" and state.basis_passes:
        parts.append(t("prices.left_recent", time=duration_text(state.remaining_s), n=state.basis_passes))
    elif state.basis == "price":
        parts.append(t("prices.left_price", time=duration_text(state.remaining_s)))
    else:
        parts.append(t("progress.left", time=duration_text(state.remaining_s)))
    return " · ".join(parts)


def probed(name: tuple, compute, device: str | None = None):
    """``compute`` (a job's timing passes, for a cache), which then probes the machine (``device``'s) as its price
    was timed, kept under ``name`` for :func:`quote`."""

    def run():
        found = compute()
        if len(_probed) >= PROBED_KEPT:
            _probed.pop(next(iter(_probed)))
        _probed[name] = current_probe(device, max_age_s=0.0)
        return found

    return run


def quote(name: tuple, seconds: float, laps: list[Lap] | None = None, device: str | None = None) -> Price:
    """What to quote for the rest of a job the lab prices at ``seconds`` (timed by :func:`probed` under ``name``):
    scaled by the job's own last passes (``laps``, a stopped run's) when there are some, else by a probe now
    against the probe taken when it was timed."""
    if laps:
        return price_left(seconds, laps)
    then = _probed.get(name)
    fresh = load_factor(then, current_probe(device)) if then is not None else None
    return price_left(seconds, (), fresh)


def price_note(price: Price) -> str:
    """What a quote rests on, for a caption beside its button."""
    if price.basis == "recent":
        return t("prices.note_recent", n=price.passes, factor=price.factor)
    if price.basis == "fresh":
        return t("prices.note_fresh", factor=price.factor)
    return t("prices.note_timed")


@contextmanager
def progress_bar(title: str, clock=time.perf_counter, price_factor: float = 1.0) -> Iterator[Progress]:
    """A :class:`Progress` whose steps draw a bar titled ``title`` (already in the reader's words); the bar is
    removed when the block ends, however it ends. ``price_factor``: the :class:`Price` factor its button quoted
    (a priced stage's first estimate is then the button's)."""
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
        yield Progress(on_update=draw, clock=clock, price_factor=price_factor)
    finally:
        slot.empty()


def time_note(verdict: TimeVerdict | None) -> None:
    """A job's predicted time beside the time it took (:func:`attnviz.core.time_agreement.time_verdict`): a caption
    when they agree within the bound, an info box that says why when they do not; nothing when no part ended."""
    if verdict is None:
        return
    (st.caption if verdict.agrees else st.info)(tr(verdict.message))

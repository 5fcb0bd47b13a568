"""The command line's prices and progress on stderr: a long job's count and time left, re-estimated as it goes.

The app's progress bar and the CLI read the same :class:`~attnviz.core.progress.Progress` states: the time left from
the job's last passes (the machine as it is now), the count of every head with those run while timing counted done.
A line goes to stderr at most every :data:`EVERY_S` seconds, none in the first ones (a short job prints only its
price), and none with ``--quiet``; stdout, the JSON included, is untouched.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from attnviz.core.progress import NO_PROGRESS, Progress, ProgressState
from attnviz.i18n.message import msg

EVERY_S = 10.0  # a progress line at most this often: a 2-minute sweep says where it is about 12 times


def duration(seconds: float) -> str:
    """``seconds`` as the app writes them, in English: "41 s", "2 min 05 s" from 90 s on."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return str(msg("progress.seconds", n=seconds))
    whole = round(seconds)
    return str(msg("progress.minutes", m=whole // 60, s=whole % 60))


def left_text(state: ProgressState) -> str:
    """The time left and what it rests on ("about 31 s left, from the last passes (3)"), or "estimating…"."""
    if state.remaining_s is None:
        return str(msg("progress.estimating"))
    if state.basis == "recent" and state.basis_passes:
        return str(msg("prices.left_recent", time=duration(state.remaining_s), n=state.basis_passes))
    if state.basis == "price":
        return str(msg("prices.left_price", time=duration(state.remaining_s)))
    return str(msg("progress.left", time=duration(state.remaining_s)))


def step_line(what: str, state: ProgressState) -> str:
    """One progress line: "head 48 of 270, about 31 s left, from the last passes (3)"."""
    return str(msg("prices.cli_step", what=what, done=state.done, total=state.total, left=left_text(state)))


def price_text(n: int, timed: int, seconds: float) -> str:
    """A job's price before it runs, what the timing ran counted: "about 41 s here for the 238 left (32 of the 270
    run while timing)"."""
    if timed >= n:
        return str(msg("prices.cli_none", n=n))
    return str(msg("prices.cli_price", n=n, timed=timed, left=n - timed, time=duration(max(1.0, seconds))))


def stderr_progress(
    what: str,
    quiet: bool,
    every_s: float = EVERY_S,
    clock: Callable[[], float] = time.perf_counter,
    stream: TextIO | None = None,
) -> Progress:
    """A reporter that writes :func:`step_line` to stderr (``stream``) every ``every_s`` seconds at most, the first
    after ``every_s``; the no-op reporter with ``quiet``."""
    if quiet:
        return NO_PROGRESS
    started = clock()
    last = {"at": started}

    def write(state: ProgressState) -> None:
        now = clock()
        if now - last["at"] < every_s or state.done >= state.total:
            return
        last["at"] = now
        print(step_line(what, state), file=stream or sys.stderr, flush=True)

    return Progress(on_update=write, clock=clock)

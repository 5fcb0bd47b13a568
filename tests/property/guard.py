"""A time limit and a memory cap around each generated input run in this process (the library and AppTest
cases; the CLI's run in forked children, see ``forked.py``).

``conftest.py`` wraps every hypothesis test's per-example function (``test.hypothesis.inner_test``, the hook
hypothesis offers for this) in :func:`guard`. Past :data:`CASE_TIMEOUT_S` a SIGALRM raises :class:`CaseTimeout`
in the case; past :data:`CASE_MEMORY_MB` of growth a watchdog thread raises :class:`CaseBlowUp` there; and the
process's high-water mark, reset when the case starts, catches a spike the watchdog did not see. Both exceptions
are BaseExceptions so that no ``except Exception`` in the code under test can swallow them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
import time

CASE_TIMEOUT_S = 120  # over the forked CLI cases' own 30 s, so that those fail on their own limit first
CASE_MEMORY_MB = 1536
_WATCH_S = 0.02


class CaseTimeout(BaseException):
    """One generated input ran past its time limit."""


class CaseBlowUp(BaseException):
    """One generated input's memory grew past the cap."""


def _kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_high_water() -> bool:
    """Reset VmHWM to the current resident size (Linux 4.0+); False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


class _Watchdog:
    """One daemon thread for the session: while a case runs, it samples the resident size and signals the main
    thread once the growth passes the cap."""

    def __init__(self) -> None:
        self.start_kib: int | None = None
        self.peak_kib = 0
        self.cap_kib = 0
        self.fired = False
        self.lock = threading.Lock()
        threading.Thread(target=self._loop, name="property-case-watchdog", daemon=True).start()

    def _loop(self) -> None:
        while True:
            time.sleep(_WATCH_S)
            with self.lock:
                if self.start_kib is None or self.fired:
                    continue
                rss = _kib("VmRSS")
                self.peak_kib = max(self.peak_kib, rss)
                if rss - self.start_kib > self.cap_kib:
                    self.fired = True
                    os.kill(os.getpid(), signal.SIGUSR1)

    def arm(self, cap_mb: int) -> int:
        with self.lock:
            self.start_kib = self.peak_kib = _kib("VmRSS")
            self.cap_kib, self.fired = cap_mb * 1024, False
            return self.start_kib

    def disarm(self) -> int:
        with self.lock:
            self.start_kib = None
            return self.peak_kib


_watchdog: _Watchdog | None = None


_active: dict[str, str | None] = {"alarm": None, "memory": None}  # the running case's messages; None between cases


def _handler(which: str, kind: type[BaseException]):
    def handler(signum, frame):
        what = _active[which]
        if what is not None:  # a late signal after the case ended is dropped
            _active[which] = None
            raise kind(what)

    return handler


@contextlib.contextmanager
def guard(timeout_s: float = CASE_TIMEOUT_S, memory_mb: int = CASE_MEMORY_MB):
    """Run the body as one bounded case: a hang or a blow-up fails it (see the module's docstring)."""
    global _watchdog
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return
    if _watchdog is None:  # the handlers stay installed: a signal that comes late must not kill the session
        signal.signal(signal.SIGALRM, _handler("alarm", CaseTimeout))
        signal.signal(signal.SIGUSR1, _handler("memory", CaseBlowUp))
        _watchdog = _Watchdog()
    _active["alarm"] = f"the case ran past {timeout_s} s"
    _active["memory"] = f"the case grew past {memory_mb} MB"
    hwm = _reset_high_water()
    start = _watchdog.arm(memory_mb)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _active["alarm"] = _active["memory"] = None
        peak = _watchdog.disarm()
    peak = max(peak, _kib("VmHWM")) if hwm else peak
    grew_mb = (peak - start) / 1024
    if grew_mb > memory_mb:
        raise CaseBlowUp(f"the case's memory grew {grew_mb:.0f} MB, over the cap of {memory_mb} MB")


def guarded(function):
    """``function`` with each call run under :func:`guard`."""

    @functools.wraps(function)
    def bounded(*args, **kwargs):
        with guard():
            return function(*args, **kwargs)

    bounded.guarded = True
    return bounded

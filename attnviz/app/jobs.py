"""A job run in pieces, priced, stopped between pieces and continued: the one run / stop / continue machine.

A long job (the Ablation page's sweep, the Patching page's exact patching of every head, and of one head position by
position) is a lab's loop over pieces, one pass each, that fills a dict as each piece ends. :class:`PieceJob` draws it:
before it runs, a Run button priced on what is left (:func:`attnviz.app.progress.quote`); while it runs, a progress bar
and a Stop button. Streamlit stops a running script at its next drawing after any click, so what the pieces finished
is already in the session under the job's key: after a Stop, or any other interruption (a click elsewhere, an error),
the job is stopped, the page shows what was done, and a Continue button is priced on what is left at the speed the
stopped run went. When the last piece ends, the page keeps the result where it keeps results and
:meth:`PieceJob.finish` keeps the time it took beside its price (:meth:`PieceJob.time_taken`) and draws the page again.

Session state: ``<name>_state`` holds {"key", "values", "laps", "status"} and the job's ``extra`` dicts (the sweep's
losses) while it runs or stands stopped; ``<name>_timing`` holds {"key", "laps", "share"} of the job this session
finished. The buttons are ``<name>_start`` and ``<name>_stop``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

import streamlit as st

from attnviz.app.progress import duration_text, price_note, progress_bar, quote, time_note
from attnviz.app.queue_view import admission, admitted, request_id
from attnviz.core.admission import Need
from attnviz.core.progress import Progress
from attnviz.core.time_agreement import Price, TimeLog, time_verdict


def about(seconds: float) -> str:
    """A predicted time for a sentence: "41 s", "2 min 05 s"; never "0 s"."""
    return duration_text(max(1.0, seconds))


def other_requests() -> int:
    """Requests of this server running beside this session's own (which is running when this is asked)."""
    return admission().n_running - 1


class PieceJob:
    """One stoppable job of a page, named ``name`` (its session state and buttons), computing ``key`` (a stopped job
    of another key waits, kept, until that key is asked for again); ``extra``: the names of further dicts the lab
    fills as the pieces end, kept across a stop beside ``values``."""

    def __init__(self, name: str, key: tuple, extra: tuple[str, ...] = ()) -> None:
        self.name, self.key, self.extra = name, key, extra
        state = st.session_state.get(f"{name}_state")
        self.state = state if state is not None and state["key"] == key else None
        self.price: Price | None = None

    @property
    def running(self) -> bool:
        return self.state is not None and self.state["status"] == "running"

    @property
    def stopped(self) -> bool:
        return self.state is not None and self.state["status"] == "stopped"

    @property
    def values(self) -> dict:
        """What the pieces finished (before a stop, or so far while running); empty before it ran."""
        return self.state["values"] if self.state is not None else {}

    def kept(self, name: str) -> dict:
        """One of the ``extra`` dicts, as :attr:`values`."""
        return self.state[name] if self.state is not None else {}

    def quote(self, priced_as: tuple, seconds: float, device: str | None) -> Price:
        """The price of what is left (``seconds``, the lab's, timed by :func:`attnviz.app.progress.probed` under
        ``priced_as``): at the speed a stopped run went, else by the machine now; kept for the buttons and the bar."""
        self.price = quote(priced_as, seconds, self.state["laps"] if self.state is not None else [], device)
        return self.price

    def offer(
        self,
        run: str,
        resume: str,
        *,
        stopped: Callable[[], None] | None = None,
        share: float | None = None,
        note: bool = True,
        primary: bool = False,
    ) -> None:
        """The Run button, labelled ``run``; after a stop, what was done (``stopped`` draws it), the time its passes
        took beside their price (``share``: the CPU share while it was priced) and Continue, labelled ``resume``.
        Under the button, what the price rests on (``note``)."""
        label = run
        if self.stopped:
            if stopped is not None:
                stopped()
            time_note(time_verdict(self.state["laps"], share))
            label = resume
        st.button(label, key=f"{self.name}_start", on_click=self._start, type="primary" if primary else "secondary")
        if note and self.price is not None:
            st.caption(price_note(self.price))

    def run(
        self, title: str, stop: str, need: Need, work: Callable[[Progress, TimeLog], object], request: str = ""
    ) -> None:
        """``work(progress, log)``: the lab's loop over the pieces left, filling :attr:`values` as each ends, under a
        progress bar titled ``title``, a Stop button labelled ``stop`` and the server's admission (``need``, the
        request named ``request`` or the job's name). Any interruption leaves the job stopped, its pieces kept."""
        factor = self.price.factor if self.price is not None else 1.0
        slot = st.empty()
        slot.button(stop, key=f"{self.name}_stop", on_click=self._stop)
        finished = False
        try:
            with (
                progress_bar(title, price_factor=factor) as progress,
                admitted(need, request_id(request or self.name, self.key)),
            ):
                work(progress, TimeLog(self.state["laps"], other_requests, scale=factor))
            finished = True
        finally:
            if not finished:
                self.state["status"] = "stopped"
        slot.empty()

    def finish(self, share: float | None = None, *, timed: bool = True) -> NoReturn:
        """After the last piece (the page has kept the result): the time it took kept beside its price (``timed``;
        ``share`` as :meth:`offer`'s), the job's state dropped, and the page drawn again with the result."""
        if timed:
            st.session_state[f"{self.name}_timing"] = {"key": self.key, "laps": self.state["laps"], "share": share}
        st.session_state.pop(f"{self.name}_state", None)
        st.rerun()

    def time_taken(self) -> None:
        """When this session ran the job to its end: the time it took beside its price."""
        timing = st.session_state.get(f"{self.name}_timing")
        if timing is not None and timing["key"] == self.key:
            time_note(time_verdict(timing["laps"], timing["share"]))

    def _start(self) -> None:
        state = st.session_state.get(f"{self.name}_state")
        kept = state if state is not None and state["key"] == self.key else {}  # Continue keeps a stop's pieces
        st.session_state[f"{self.name}_state"] = {
            "key": self.key,
            "values": kept.get("values", {}),
            "laps": kept.get("laps", []),
            **{name: kept.get(name, {}) for name in self.extra},
            "status": "running",
        }

    def _stop(self) -> None:
        if (state := st.session_state.get(f"{self.name}_state")) is not None:
            state["status"] = "stopped"

"""What a visitor sees while their request waits for memory: their place, an estimate, and a Cancel button.

The server has one :class:`~attnviz.core.admission.Admission` (``st.cache_resource``),
whose budget is ATTNVIZ_MEMORY_MB or the default from the container's limit. A heavy
job runs inside :func:`admitted`: it starts at once when its predicted bytes fit,
otherwise the page shows "Waiting in the queue: place 3 of 5, about 2 min" and redraws
it every :data:`attnviz.settings.ADMISSION_POLL_S`. Each redraw is an ``st`` call,
which is where Streamlit stops a script whose visitor clicked something: a click on
Cancel (or any other widget) raises its RerunException there, the ``finally`` takes
the ticket out of the queue, and the rerun finds the request marked cancelled in the
session and says so, with a button that runs it again.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from attnviz import settings
from attnviz.app.progress import duration_text
from attnviz.core.admission import Admission, Need, Place, Ticket, memory_budget_bytes
from attnviz.core.devices import accelerator_count, device_free_bytes
from attnviz.i18n.translate import t

CANCELLED = "admission_cancelled"  # session state: the request ids this session cancelled


def log_admission(ticket: Ticket, in_flight: int, waiting: int, budget: int) -> None:
    """One line on the server's stderr per admission, for an operator and the admission test to read."""
    print(
        f"attnviz: admitted {ticket.need.nbytes / 2**20:,.0f} MB, in flight {in_flight / 2**20:,.0f} MB of "
        f"{budget / 2**20:,.0f} MB, {waiting} waiting",
        file=sys.stderr,
        flush=True,
    )


@st.cache_resource(show_spinner=False)
def admission() -> Admission:
    """The process's one admission, shared by every session (see :mod:`attnviz.core.admission`)."""
    budget, running = memory_budget_bytes(), settings.max_running(accelerators=accelerator_count())
    print(
        f"attnviz: memory budget for work in flight {budget / 2**20:,.0f} MB, at most {running} running at once",
        file=sys.stderr,
        flush=True,
    )
    return Admission(
        budget,
        max_running=running,
        on_admit=lambda ticket, in_flight, waiting: log_admission(ticket, in_flight, waiting, budget),
        device_free=device_free_bytes,
    )


def request_id(kind: str, key: tuple) -> str:
    """A short, stable name for a request (its cache key) within this process: the widget keys and the session's
    memory of a cancel use it."""
    return hashlib.sha1(repr((kind, key)).encode("utf-8", "replace")).hexdigest()[:16]


def megabytes(nbytes: int) -> str:
    """``nbytes`` in MB for a sentence: "489 MB", "0.3 MB" (a tiny request does not read "0 MB")."""
    mb = nbytes / 2**20
    return f"{mb:,.0f} MB" if mb >= 10 or mb == 0 else f"{mb:.1f} MB"


def waiting_text(place: Place) -> str:
    """ "Waiting in the queue: place 3 of 5, about 2 min 05 s", in the reader's language."""
    if place.place <= 1:
        return t("admission.waiting_next", of=place.of, time=duration_text(place.wait_s))
    return t("admission.waiting", place=place.place, of=place.of, time=duration_text(place.wait_s))


def _cancel(rid: str) -> None:
    st.session_state.setdefault(CANCELLED, set()).add(rid)


def _run_again(rid: str) -> None:
    st.session_state.setdefault(CANCELLED, set()).discard(rid)


def stop_if_cancelled(rid: str) -> None:
    """Stop the page, saying the request was cancelled and offering to run it again, if this session cancelled it."""
    if rid in st.session_state.get(CANCELLED, set()):
        st.info(t("admission.cancelled"))
        st.button(t("admission.run_again"), key=f"admission_again_{rid}", on_click=_run_again, args=(rid,))
        st.stop()


@contextmanager
def admitted(need: Need | None, rid: str, gate: Admission | None = None) -> Iterator[None]:
    """Run the block once ``need`` fits the server's budget, showing the visitor their place while it waits.

    ``need`` None: light work (derived from a result already held), admitted without asking. The ticket is
    released in ``finally``, whether the block returns, raises, or Streamlit stops or reruns the script.
    """
    if need is None:
        yield
        return
    stop_if_cancelled(rid)
    gate = gate or admission()
    ticket = gate.enter(need)
    try:
        if ticket.state != "running":
            box = st.empty()
            with box.container():
                line = st.empty()
                line.info(waiting_text(gate.place(ticket)))
                if need.nbytes > gate.budget_bytes:
                    st.caption(
                        t("admission.oversize", need_mb=need.nbytes / 2**20, budget_mb=gate.budget_bytes / 2**20)
                    )
                else:
                    st.caption(
                        t(
                            "admission.why_capped" if gate.max_running else "admission.why",
                            budget_mb=gate.budget_bytes / 2**20,
                            need=megabytes(need.nbytes),
                            max_running=gate.max_running,
                            running=gate.n_running,
                            in_flight=megabytes(gate.in_flight_bytes),
                        )
                    )
                st.button(t("admission.cancel"), key=f"admission_cancel_{rid}", on_click=_cancel, args=(rid,))
            while not gate.wait(ticket, timeout=settings.ADMISSION_POLL_S):
                line.info(waiting_text(gate.place(ticket)))  # an st call: where a click's rerun stops this script
            box.empty()
        yield
    finally:
        gate.release(ticket)

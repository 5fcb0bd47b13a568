"""Admission control: one process-wide budget for the memory of the work in flight, and a FIFO queue for the rest.

Every heavy request of a server (a capture, a scaling run, a generation, …) is
priced before it runs (:class:`Need`: predicted peak bytes above the process's
base, and predicted seconds alone on this machine). A request starts only when
its bytes fit in what the budget has left; otherwise it waits in a strict FIFO
queue: only the request at the head may start, so a small request never
overtakes a large one (no large request starves). A request larger than the
whole budget starts alone, once nothing else runs, so nothing deadlocks.

A waiting request has a place in the queue and an estimated wait, from a
processor-sharing model of the machine: the jobs running at once share its
cores equally (torch already uses every core for one job), so a job predicted
to take ``s`` seconds alone takes ``k x s`` while ``k`` run. The budget's
default comes from the container's memory limit (cgroup v2 or v1) or the
machine's RAM, less what the models and the result cache hold
(:func:`default_budget_bytes`). Pure Python: no Streamlit, no torch.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from attnviz import settings

# a cgroup "limit" this large (v1 writes 2**63 rounded down to a page when there is none) means no limit
NO_LIMIT_BYTES = 2**60
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Need:
    """What one request is predicted to cost: ``nbytes`` of host memory at its peak (above the process's base,
    models loaded) and ``seconds`` alone on this machine; for work on an accelerator, ``device_nbytes`` of
    ``device``'s memory too ("cuda:0"; None or "cpu": host memory alone)."""

    nbytes: int
    seconds: float
    device_nbytes: int = 0
    device: str | None = None

    def __post_init__(self) -> None:
        if self.nbytes < 0 or self.seconds < 0 or self.device_nbytes < 0:
            raise ValueError(f"a request's need must be >= 0 (nbytes {self.nbytes}, seconds {self.seconds})")

    @property
    def on_accelerator(self) -> bool:
        return self.device is not None and self.device.split(":")[0] != "cpu" and self.device_nbytes > 0


def read_cgroup_limit(root: Path = CGROUP_ROOT) -> int | None:
    """The container's memory limit in bytes: cgroup v2's ``memory.max``, else v1's
    ``memory/memory.limit_in_bytes``; None where neither exists, either says "max", or the number is so large that
    it means none (:data:`NO_LIMIT_BYTES`)."""
    for path in (root / "memory.max", root / "memory" / "memory.limit_in_bytes"):
        try:
            text = path.read_text(encoding="ascii", errors="replace")[:64].strip()
        except OSError:
            continue
        if text == "max":
            return None
        try:
            value = int(text)
        except ValueError:
            continue
        return value if 0 < value < NO_LIMIT_BYTES else None
    return None


def physical_memory_bytes() -> int | None:
    """The machine's RAM (pages x page size, ``os.sysconf``); None where the system does not say."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def default_budget_bytes(
    cache_bytes: int,
    models_reserve_bytes: int,
    cgroup_root: Path = CGROUP_ROOT,
    physical: Callable[[], int | None] = physical_memory_bytes,
) -> int:
    """The budget for work in flight when the operator sets none: the memory this process may use, less the
    result cache's bound and the models' reserve (the process's base with every bundled model loaded).

    The memory it may use is the container's limit (:func:`read_cgroup_limit`) where there is one, else the
    machine's RAM (the smaller of the two where both say). Never below 0: a budget of 0 runs one request at a time
    (each is larger than the budget and starts alone).
    """
    limits = [value for value in (read_cgroup_limit(cgroup_root), physical()) if value]
    if not limits:
        return 0
    return max(0, min(limits) - cache_bytes - models_reserve_bytes)


def memory_budget_bytes(
    cgroup_root: Path = CGROUP_ROOT, physical: Callable[[], int | None] = physical_memory_bytes
) -> int:
    """This server's budget: ATTNVIZ_MEMORY_MB where the operator sets it, else :func:`default_budget_bytes` with
    the result cache's bound and :data:`attnviz.settings.MODELS_RESERVE_MB`."""
    override = settings.memory_mb_override()
    if override is not None:
        return override * 2**20
    return default_budget_bytes(settings.cache_bytes(), settings.MODELS_RESERVE_MB * 2**20, cgroup_root, physical)


@dataclass(eq=False)
class Ticket:
    """One request's place in the admission: ``state`` is "waiting", "running", "cancelled" or "done"."""

    id: int
    need: Need
    state: str = "waiting"
    work_done_s: float = 0.0  # seconds of its predicted work done so far (processor sharing), while running
    started_at: float | None = None
    entered_at: float = 0.0


@dataclass(frozen=True)
class Place:
    """Where a waiting ticket stands: ``place`` of ``of`` waiting (1 = next), and the estimated wait in seconds
    (0 once it runs)."""

    place: int
    of: int
    wait_s: float


@dataclass
class Admission:
    """The process's admission: a budget in bytes, the tickets running and the FIFO queue. Thread-safe.

    Use: ``ticket = admission.enter(need)``; then ``admission.wait(ticket, timeout)`` until it returns True
    (admitted) while showing :meth:`place`; finally ``admission.release(ticket)`` however the request ended
    (it leaves the queue or frees its bytes). ``on_admit`` hears each admission (for the server's log).
    """

    budget_bytes: int
    max_running: int | None = None  # at most this many at once (None: memory alone decides)
    clock: Callable[[], float] = time.monotonic
    on_admit: Callable[[Ticket, int, int], None] | None = None  # (ticket, bytes in flight, waiting after)
    # an accelerator's free memory now, in bytes (None: it cannot say; then it is not checked)
    device_free: Callable[[str], int | None] | None = None
    device_margin: float = 0.9  # the share of a device's room the requests on it may ask
    _running: list[Ticket] = field(default_factory=list)
    _queue: list[Ticket] = field(default_factory=list)
    _ids: itertools.count = field(default_factory=itertools.count)
    _advanced_at: float | None = None

    def __post_init__(self) -> None:
        if self.budget_bytes < 0:
            raise ValueError(f"the memory budget must be >= 0 bytes, not {self.budget_bytes}")
        if self.max_running is not None and self.max_running < 1:
            raise ValueError(f"at least one request must be allowed to run, not {self.max_running}")
        self._cond = threading.Condition()

    # ---- state, under the condition's lock -------------------------------------------------------------------

    @property
    def in_flight_bytes(self) -> int:
        with self._cond:
            return sum(ticket.need.nbytes for ticket in self._running)

    @property
    def n_running(self) -> int:
        with self._cond:
            return len(self._running)

    @property
    def n_waiting(self) -> int:
        with self._cond:
            return len(self._queue)

    def _advance(self) -> None:
        """Credit each running ticket with its share of the time since the last change (processor sharing)."""
        now = self.clock()
        if self._advanced_at is not None and self._running:
            share = (now - self._advanced_at) / len(self._running)
            for ticket in self._running:
                ticket.work_done_s += share
        self._advanced_at = now

    def _fits(self, need: Need, in_flight: int, n_running: int, running: list[Need] | None = None) -> bool:
        if n_running == 0:
            return True
        if self.max_running is not None and n_running >= self.max_running:
            return False
        if in_flight + need.nbytes > self.budget_bytes:
            return False
        return self._fits_device(need, running if running is not None else [t.need for t in self._running])

    def _fits_device(self, need: Need, running: list[Need]) -> bool:
        """Whether ``need``'s device memory fits beside what the requests running on that device asked, within
        ``device_margin`` of the device's room: its free memory now plus what they asked (they are taken to hold
        it). One request alone on a device always starts: the device refuses it, in one line, if it does not fit."""
        if not need.on_accelerator or self.device_free is None:
            return True
        same = sum(other.device_nbytes for other in running if other.device == need.device)
        if not same:
            return True
        free = self.device_free(need.device)
        return free is None or same + need.device_nbytes <= self.device_margin * (free + same)

    def _admit_from_head(self) -> None:
        """Start tickets from the head of the queue while the head fits (strict FIFO: the first that does not
        fit stops the rest)."""
        in_flight = sum(ticket.need.nbytes for ticket in self._running)
        started = False
        while self._queue and self._fits(self._queue[0].need, in_flight, len(self._running)):
            self._advance()
            ticket = self._queue.pop(0)
            ticket.state, ticket.started_at = "running", self.clock()
            self._running.append(ticket)
            in_flight += ticket.need.nbytes
            started = True
            if self.on_admit is not None:
                self.on_admit(ticket, in_flight, len(self._queue))
        if started:
            self._cond.notify_all()

    # ---- what a request does ---------------------------------------------------------------------------------

    def enter(self, need: Need) -> Ticket:
        """A new ticket at the back of the queue; it starts at once if it is the head and fits."""
        with self._cond:
            ticket = Ticket(id=next(self._ids), need=need, entered_at=self.clock())
            self._queue.append(ticket)
            self._admit_from_head()
            return ticket

    def wait(self, ticket: Ticket, timeout: float | None = None) -> bool:
        """Block until ``ticket`` runs (True) or ``timeout`` seconds pass or it is cancelled (False)."""
        deadline = None if timeout is None else self.clock() + timeout
        with self._cond:
            while ticket.state == "waiting":
                remaining = None if deadline is None else deadline - self.clock()
                if remaining is not None and remaining <= 0:
                    break
                self._cond.wait(remaining)
            return ticket.state == "running"

    def cancel(self, ticket: Ticket) -> None:
        """Take a waiting ticket out of the queue (the ones behind it move up); a running one is left to finish."""
        with self._cond:
            if ticket.state == "waiting":
                self._queue.remove(ticket)
                ticket.state = "cancelled"
                self._admit_from_head()
                self._cond.notify_all()

    def release(self, ticket: Ticket) -> None:
        """The request ended, however it ended: a waiting ticket leaves the queue, a running one frees its bytes
        and the head of the queue may start. Safe to call twice."""
        with self._cond:
            if ticket.state == "waiting":
                self._queue.remove(ticket)
                ticket.state = "cancelled"
            elif ticket.state == "running":
                self._advance()
                self._running.remove(ticket)
                ticket.state = "done"
            else:
                return
            self._admit_from_head()
            self._cond.notify_all()

    # ---- what a waiting visitor is told ----------------------------------------------------------------------

    def place(self, ticket: Ticket) -> Place:
        """``ticket``'s place among the waiting (1-based) and its estimated wait (see :meth:`estimated_wait_s`)."""
        with self._cond:
            if ticket.state != "waiting":
                return Place(0, len(self._queue), 0.0)
            return Place(self._queue.index(ticket) + 1, len(self._queue), self._estimated_wait_s(ticket))

    def estimated_wait_s(self, ticket: Ticket) -> float:
        """Seconds until ``ticket`` starts, if every job takes its predicted time: the running jobs and those ahead
        in the queue share the cores equally, and start in FIFO order as memory frees (0 once it runs)."""
        with self._cond:
            return self._estimated_wait_s(ticket) if ticket.state == "waiting" else 0.0

    def _estimated_wait_s(self, ticket: Ticket) -> float:
        self._advance()
        # a job past its prediction counts as ending now
        running = [[max(0.0, t.need.seconds - t.work_done_s), t.need.nbytes] for t in self._running]
        ahead = self._queue[: self._queue.index(ticket) + 1]
        elapsed = 0.0
        for i, waiting in enumerate(ahead):
            while running and not self._fits(waiting.need, sum(nbytes for _, nbytes in running), len(running), []):
                k = len(running)
                step = min(left for left, _ in running)  # work until the first running job ends
                elapsed += step * k
                running = [[left - step, nbytes] for left, nbytes in running if left - step > 1e-9]
            if i == len(ahead) - 1:
                return elapsed
            running.append([waiting.need.seconds, waiting.need.nbytes])
        return elapsed

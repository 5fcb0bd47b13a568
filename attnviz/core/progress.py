"""Progress of a long job, and how long it has left, calibrated on the machine that runs it.

A job (a capture, a training, a measurement) is one or more stages, each a
known number of steps; a step may carry a relative cost (``weights``: a
capture's layers cost about the same, a scaling run's sizes cost as their
FLOPs). The job calls :meth:`Progress.step` as it goes, and a callback gets a
:class:`ProgressState` after each step: counts, the elapsed time and the time
left, estimated from the steps this machine has done, never from a constant
measured on another one. Before the first step (for steps of different costs,
before two different costs are done) there is nothing to calibrate on, and the
state says so (``remaining_s`` is None: "estimating…").

The estimate follows the machine as it is now, not as it was when the job began: an equal-weight stage prices its
steps left at the rate of its last passes (:func:`recent_window`: at least :data:`RECENT_PASSES` passes and
:data:`RECENT_SECONDS` of them), so another process taking the cores halfway moves it within a few passes. A stage
the caller priced before it ran (``prices``: each step's predicted seconds, as a page quoted them) shows that price
before its first pass, then scales the price of what is left by real / predicted over the same recent passes. Steps
done before this run (``done``: the timing passes, or a stopped run's) count in ``done`` and ``total``, so the bar
counts what the button said, and are never taken as measured here.

:data:`NO_PROGRESS` (the default everywhere) does nothing, so library calls
and the CLI are unchanged. The library never translates: a stage's ``label``
is a catalogue key the app renders with ``done`` and ``total``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Clock = Callable[[], float]

RECENT_PASSES = 3  # the time left is priced on at least the last 3 passes (one pass's time is noise) ...
RECENT_SECONDS = 5.0  # ... and at least the last 5 s of them: a load that comes or goes shows within seconds
# "price": the stage's price as quoted, before any pass; "recent": its last passes; "fit": a fit of every step's
# time against its weight (steps of different costs). Later stages not begun add the job's mean rate to either.
BASES = ("price", "recent", "fit")


@dataclass(frozen=True)
class ProgressState:
    """Where a job stands after a step.

    label: the stage's catalogue key (rendered with ``done``, ``total`` and ``params``);
    done, total: steps of this stage; stage, n_stages: this stage's number (1-based) and how many were declared;
    fraction: the share of the whole job's work done (by weight); elapsed_s: since the job started;
    remaining_s: the estimate of what is left, or None until a step has calibrated it; basis: what it rests on,
    one of :data:`BASES` ("" when None), and ``basis_passes`` the passes it was measured on ("recent").
    """

    label: str
    done: int
    total: int
    stage: int
    n_stages: int
    fraction: float
    elapsed_s: float
    remaining_s: float | None
    params: tuple[tuple[str, object], ...] = ()
    basis: str = ""
    basis_passes: int = 0

    @property
    def values(self) -> dict[str, object]:
        return {"done": self.done, "total": self.total, **dict(self.params)}


@dataclass
class _Stage:
    """A stage's steps: ``before`` of them done before this run (untimed), then ``durations`` of those timed here,
    a pass (one :meth:`Progress.step` call) being ``passes``' (steps, seconds); ``priced``: its weights are the
    seconds each step was quoted at."""

    label: str
    weights: list[float]
    params: tuple[tuple[str, object], ...] = ()
    durations: list[float] = field(default_factory=list)
    before: int = 0
    priced: bool = False
    passes: list[tuple[int, float]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.weights)

    @property
    def done(self) -> int:
        return self.before + len(self.durations)

    def seconds_left(self, price_factor: float = 1.0) -> tuple[float | None, str, int]:
        """(the seconds its steps left will take, the basis, the passes measured on); None, "" before any."""
        weights = self.weights[self.before :]
        if self.priced:
            left = sum(weights[len(self.durations) :]) * price_factor
            if not self.passes:
                return left, "price", 0
            window = recent_window(self.passes, skip_first=False)
            steps = sum(n for n, _ in window)
            first = len(self.durations) - steps
            quoted = sum(weights[first : first + steps]) * price_factor
            if quoted > 0:
                return left * sum(s for _, s in window) / quoted, "recent", len(window)
        if len(set(weights)) <= 1 and self.passes:
            if len(weights) == len(self.durations):
                return 0.0, "recent", 0
            window = recent_window(self.passes, skip_first=True)
            per_step = sum(s for _, s in window) / max(1, sum(n for n, _ in window))
            return per_step * (len(weights) - len(self.durations)), "recent", len(window)
        seconds = stage_seconds(weights, self.durations)
        return seconds, ("fit" if seconds is not None else ""), 0


def recent_window(passes: Sequence[tuple[int, float]], skip_first: bool = True) -> list[tuple[int, float]]:
    """The last passes, (steps, seconds) each, that the time left is priced on: the fewest, counted back from the
    last, that are at least RECENT_PASSES passes and RECENT_SECONDS long (all of them when fewer); the first pass
    is left out from the second on when ``skip_first`` (it carries one-time warm-up: building models, kernels)."""
    kept = list(passes[1:] if skip_first and len(passes) >= 2 else passes)
    window: list[tuple[int, float]] = []
    seconds = 0.0
    for found in reversed(kept):
        window.append(found)
        seconds += found[1]
        if len(window) >= RECENT_PASSES and seconds >= RECENT_SECONDS:
            break
    return window[::-1]


def _check_weights(total: int, weights: Sequence[float] | None) -> list[float]:
    if total < 0:
        raise ValueError(f"a stage has at least 0 steps, not {total}")
    if weights is None:
        return [1.0] * total
    if len(weights) != total or any(w < 0 for w in weights):
        raise ValueError(f"{len(weights)} weights for {total} steps (each >= 0): {list(weights)[:8]}")
    return [float(w) for w in weights]


def stage_seconds(weights: Sequence[float], durations: Sequence[float]) -> float | None:
    """The seconds the steps ``weights[len(durations):]`` will take, from the ``durations`` of those done.

    Equal weights: the mean step, leaving the first out from the second on (it carries one-time warm-up: building
    models, loading kernels). Unequal weights: a step costs ``a·weight + b`` (a per-step overhead ``b``, which
    dominates small runs), fitted by least squares once two different weights are done; before that, None: one
    size cannot tell the overhead from the growth, and scaling it by weight alone overstates the large ones
    several times over. None before any step.
    """
    n = len(durations)
    if n == 0:
        return None
    done, left = list(weights[:n]), list(weights[n:])
    if not left:
        return 0.0
    if len(set(weights)) <= 1:
        kept = durations[1:] if n >= 2 else durations
        return sum(kept) / len(kept) * len(left)
    if len(set(done)) < 2:
        return None
    mean_w, mean_d = sum(done) / n, sum(durations) / n
    var = sum((w - mean_w) ** 2 for w in done)
    a = max(0.0, sum((w - mean_w) * (d - mean_d) for w, d in zip(done, durations, strict=True)) / var)
    b = max(0.0, mean_d - a * mean_w)
    return a * sum(left) + b * len(left)


class Progress:
    """Counts a job's steps and estimates the time left; ``on_update(state)`` after each step.

    Stages are declared as they begin (:meth:`stage`), or up front (:meth:`plan`), so the estimate can count the
    later ones: a stage that has not started yet is estimated at the job's rate so far (seconds per unit of weight),
    since its own steps cannot have calibrated it.
    """

    def __init__(
        self,
        on_update: Callable[[ProgressState], None] | None = None,
        clock: Clock = time.perf_counter,
        price_factor: float = 1.0,
    ):
        """``price_factor``: what a priced stage's prices are multiplied by before its first pass (the page's
        fresh measurement of the machine against the one its prices were timed at, or a stopped run's passes)."""
        self._on_update, self._clock = on_update, clock
        self.price_factor = price_factor
        self._start = clock()
        self._last = self._start
        self._stages: list[_Stage] = []
        self._current = -1

    def plan(self, stages: Sequence[tuple[str, int] | tuple[str, int, Sequence[float]]]) -> None:
        """Declare the job's stages in order: (label, total) or (label, total, weights), so the estimate counts them
        all from the start. Each then begins with :meth:`stage` (or the first with the first :meth:`step`)."""
        self._stages = [_Stage(s[0], _check_weights(s[1], s[2] if len(s) > 2 else None)) for s in stages]
        self._current = -1

    def stage(
        self,
        label: str,
        total: int,
        weights: Sequence[float] | None = None,
        *,
        done: int = 0,
        prices: Sequence[float] | None = None,
        **params: object,
    ) -> None:
        """Begin the next stage: the planned one, when it has this label (its total and weights replaced; a plan's
        weights are kept when none are given and the total is the plan's), or a new one put before the rest of the
        plan. ``done``: steps of the ``total`` done before this run (counted, never timed); ``prices``: the
        predicted seconds of each of the ``total - done`` steps left, as quoted (they are its weights then, and the
        state is drawn at once, with that price)."""
        if not 0 <= done <= total:
            raise ValueError(f"{done} steps done before of a stage of {total}")
        if prices is not None:
            if weights is not None or len(prices) != total - done:
                raise ValueError(f"{len(prices)} prices for the {total - done} steps left (and no weights)")
            mean = sum(prices) / len(prices) if prices else 1.0
            weights = [mean] * done + [float(p) for p in prices]
        given = weights
        weights = _check_weights(total, weights)
        following = self._current + 1
        if following < len(self._stages) and self._stages[following].label == label:
            planned = self._stages[following]
            if given is not None or len(planned.weights) != total:
                planned.weights = weights
            planned.params = tuple(params.items())
            planned.before, planned.priced = done, prices is not None
        else:
            self._stages.insert(following, _Stage(label, weights, tuple(params.items()), before=done))
            self._stages[following].priced = prices is not None
        self._current = following
        self._last = self._clock()
        if (prices is not None or done) and self._on_update is not None:
            self._on_update(self.state())  # the count (and the price) before the first pass, as the button said

    def step(self, n: int = 1) -> None:
        """``n`` steps of the current stage done (a step past its total extends it: nothing is left then)."""
        if self._current < 0 and self._stages:
            self._current = 0  # the plan's first stage, begun when the job started
        if self._current < 0:
            raise ValueError("Progress.step before any stage: call stage(label, total) first")
        now = self._clock()
        current = self._stages[self._current]
        current.passes.append((n, now - self._last))
        for _ in range(n):
            current.durations.append((now - self._last) / n)
            if current.done > current.total:
                current.weights.append(current.weights[-1] if current.weights else 1.0)
        self._last = now
        if self._on_update is not None:
            self._on_update(self.state())

    def state(self) -> ProgressState:
        """The job now: counts of the current stage, elapsed and estimated remaining time."""
        now = self._clock()
        if self._current < 0:
            return ProgressState("", 0, 0, 0, 0, 0.0, now - self._start, None)
        current = self._stages[self._current]
        left, basis, passes = current.seconds_left(self.price_factor)
        later = sum(sum(s.weights) for s in self._stages[self._current + 1 :])
        if left is not None and later:
            rate = self._rate()
            left = None if rate is None else left + rate * later
            basis = basis if left is not None else ""
        total_weight = sum(sum(s.weights) for s in self._stages)
        done_weight = sum(sum(s.weights[: s.done]) for s in self._stages)
        return ProgressState(
            label=current.label,
            done=min(current.done, current.total),
            total=current.total,
            stage=self._current + 1,
            n_stages=len(self._stages),
            fraction=done_weight / total_weight if total_weight else 1.0,
            elapsed_s=now - self._start,
            remaining_s=left,
            params=current.params,
            basis=basis if left is not None else "",
            basis_passes=passes,
        )

    def _rate(self) -> float | None:
        """Seconds per unit of weight over every step done so far; None before any step that weighs something."""
        seconds = sum(sum(s.durations) for s in self._stages)
        weight = sum(sum(s.weights[s.before : s.done]) for s in self._stages)
        return seconds / weight if weight else None


class _NoProgress(Progress):
    """The default reporter: stages and steps are accepted and nothing is measured or called."""

    def __init__(self) -> None:
        super().__init__()

    def plan(self, stages) -> None:
        pass

    def stage(self, label: str, total: int, weights: Sequence[float] | None = None, **params: object) -> None:
        pass  # done= and prices= arrive in params: nothing is counted

    def step(self, n: int = 1) -> None:
        pass


NO_PROGRESS: Progress = _NoProgress()


def or_none(progress: Progress | None) -> Progress:
    """``progress``, or the no-op reporter when None."""
    return NO_PROGRESS if progress is None else progress

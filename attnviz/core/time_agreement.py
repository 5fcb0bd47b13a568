"""A job's predicted time beside the time it took, and why they differ.

A page that quotes a time before a job runs ("about 41 s": the ablation sweep, exact patching of every head) shows
the time it took beside it once the job ends or is stopped. The job runs in parts (a batched pass each), and a
:class:`TimeLog` keeps a :class:`Lap` as each part ends: its predicted seconds, the wall-clock seconds it took, this
process's CPU seconds meanwhile (``time.process_time``: every thread's, torch's workers included) and how many
other requests of this server were running. :func:`time_verdict` compares the sums:

- ``agree``: the time taken is within a factor of :data:`TIME_FACTOR` of the prediction, or within
  :data:`TIME_FLOOR_S` of it;
- slower than that: ``shared`` when other requests of this server ran during the job (they share its cores);
  ``load`` when the job's CPU time stayed within the factor of what the timed passes implied (the prediction times
  the CPU seconds a wall-clock second the timing ran at): the work cost what was predicted and the clock ran long,
  so something else held the machine's cores;
- faster than that: ``timed_busy`` when the job computed for more than the factor times the CPU seconds a second
  the timing passes got: those passes were timed on a busy machine;
- otherwise ``off``: the prediction itself was wrong, and the part (the passes from one layer) that differs most is
  named.

The bound is stated, with its reason: the project holds its time estimates to ±30 % of the real time on an idle
machine (docs/benchmarks.md, the progress estimates' target; the sweep's prediction met it at +3 % on SmolLM2).
predicted / real within [0.7, 1.3] is real / predicted within [0.77, 1.43]: a factor of 1.5, rounded up. A
difference under a second is never remarked: the pages never quote a time under "1 s", and a pass of milliseconds
varies by more than itself with the scheduler.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from attnviz.core.progress import recent_window
from attnviz.i18n.message import Message, msg

TIME_FACTOR = 1.5  # real / predicted within [1/1.5, 1.5]: the ±30 % target of the project's time estimates, inverted
TIME_FLOOR_S = 1.0  # and a difference under a second always agrees: no page quotes less than "1 s"
REASONS = ("agree", "shared", "load", "timed_busy", "off")


@dataclass(frozen=True)
class Lap:
    """One part of a job, as it ended: the first layer its passes ran from, its predicted seconds (as quoted: the
    lab's price times ``scale``), the wall-clock and this process's CPU seconds it took, and the most other requests
    of this server running as it ended."""

    layer: int
    predicted_s: float
    wall_s: float
    cpu_s: float
    others: int = 0
    scale: float = 1.0


class TimeLog:
    """Laps of a job as its parts end (``laps``: a list kept by the caller, so a stopped job's laps outlive it and a
    continued one adds to them); ``others()``: how many other requests of this server are running now."""

    def __init__(
        self,
        laps: list[Lap] | None = None,
        others: Callable[[], int] | None = None,
        wall: Callable[[], float] = time.perf_counter,
        cpu: Callable[[], float] = time.process_time,
        scale: float = 1.0,
    ) -> None:
        """``scale``: what each part's price was multiplied by when quoted (:func:`price_left`'s factor)."""
        self.laps = [] if laps is None else laps
        self._others, self._wall, self._cpu, self.scale = others, wall, cpu, scale

    @contextmanager
    def part(self, layer: int, predicted_s: float) -> Iterator[None]:
        """Time the block as one part; a part that raises (a stop) is not kept: it did not end."""
        wall, cpu = self._wall(), self._cpu()
        yield
        others = max(0, int(self._others())) if self._others is not None else 0
        self.laps.append(
            Lap(layer, predicted_s * self.scale, self._wall() - wall, self._cpu() - cpu, others, self.scale)
        )


@dataclass(frozen=True)
class Price:
    """What a job (or what is left of it) is quoted at: ``seconds``, the lab's price times ``factor``, and what the
    factor rests on (``basis``): "fresh" (a short measurement of the machine now against one taken when the price
    was timed), "recent" (the last ``passes`` parts this job ran: real / price) or "timed" (the price as timed)."""

    seconds: float
    factor: float
    basis: str
    passes: int = 0


def recent_ratio(laps: Sequence[Lap]) -> tuple[float, int] | None:
    """Real / the lab's price over a job's last parts (as :func:`attnviz.core.progress.recent_window` picks them:
    at least 3 parts and 5 s), and how many; None without a part priced above 0."""
    n = len(recent_window([(1, lap.wall_s) for lap in laps], skip_first=False))
    parts = list(laps[len(laps) - n :]) if n else []
    priced = sum(lap.predicted_s / lap.scale for lap in parts if lap.scale > 0)
    if not parts or priced <= 0:
        return None
    return sum(lap.wall_s for lap in parts) / priced, len(parts)


def price_left(seconds: float, laps: Sequence[Lap] = (), fresh: float | None = None) -> Price:
    """The quote of what is left of a job the lab prices at ``seconds``: scaled by its own last parts when it ran
    some (a Continue after a Stop), else by ``fresh`` (the machine now against when it was timed), else as is."""
    ratio = recent_ratio(laps)
    if ratio is not None:
        return Price(seconds * ratio[0], ratio[0], "recent", ratio[1])
    if fresh is not None:
        return Price(seconds * fresh, fresh, "fresh")
    return Price(seconds, 1.0, "timed")


def cpu_share(wall_s: float, cpu_s: float) -> float | None:
    """CPU seconds a wall-clock second (2.0: two cores busy throughout); None when nothing was timed."""
    return cpu_s / wall_s if wall_s > 0 else None


@dataclass(frozen=True)
class TimeVerdict:
    """The prediction beside what a job took: the sums over its laps, the reason (one of :data:`REASONS`) and the
    sentence that says it."""

    predicted_s: float
    wall_s: float
    cpu_s: float
    reason: str
    message: Message

    @property
    def agrees(self) -> bool:
        return self.reason == "agree"


def _worst_layer(laps: Sequence[Lap]) -> tuple[int, float, float]:
    """The layer whose passes differ most from their prediction: (layer, their predicted s, their wall s)."""
    by_layer: dict[int, list[float]] = {}
    for lap in laps:
        sums = by_layer.setdefault(lap.layer, [0.0, 0.0])
        sums[0] += lap.predicted_s
        sums[1] += lap.wall_s
    layer, (predicted, wall) = max(by_layer.items(), key=lambda item: (abs(item[1][1] - item[1][0]), -item[0]))
    return layer, predicted, wall


def time_verdict(
    laps: Sequence[Lap],
    timed_share: float | None = None,
    factor: float = TIME_FACTOR,
    floor_s: float = TIME_FLOOR_S,
) -> TimeVerdict | None:
    """The prediction against the time the ``laps`` took, and why they differ beyond ``factor`` (and ``floor_s``);
    ``timed_share``: the CPU seconds a second measured while the job was priced (:func:`cpu_share`), None when
    unknown (then neither ``load`` nor ``timed_busy`` can be told). None when no part ended."""
    if not laps:
        return None
    predicted = sum(lap.predicted_s for lap in laps)
    wall = sum(lap.wall_s for lap in laps)
    cpu = sum(lap.cpu_s for lap in laps)
    ratio = wall / predicted if predicted > 0 else float("inf")
    common = {"predicted": predicted, "took": wall, "factor": factor, "floor": floor_s}
    if abs(wall - predicted) <= floor_s or 1 / factor <= ratio <= factor:
        return TimeVerdict(predicted, wall, cpu, "agree", msg("time_agree.agree", **common))
    slower = ratio > factor
    expected_cpu = predicted * timed_share if timed_share is not None else None
    run_share = cpu_share(wall, cpu)
    others = max(lap.others for lap in laps)
    if slower and others:
        reason, why = "shared", msg("time_agree.shared", n=others)
    elif slower and expected_cpu is not None and cpu <= factor * expected_cpu:
        reason, why = "load", msg("time_agree.load", cpu=cpu, expected=expected_cpu)
    elif not slower and timed_share is not None and run_share is not None and run_share > factor * timed_share:
        reason, why = "timed_busy", msg("time_agree.timed_busy", timed=timed_share, run=run_share)
    else:
        layer, part_predicted, part_took = _worst_layer(laps)
        reason = "off"
        why = msg("time_agree.off", layer=layer, part_predicted=part_predicted, part_took=part_took)
    key = "time_agree.slower" if slower else "time_agree.faster"
    ratio_shown = ratio if slower else (predicted / wall if wall > 0 else float("inf"))
    return TimeVerdict(predicted, wall, cpu, reason, msg(key, **common, ratio=ratio_shown, why=why))


__all__ = [
    "REASONS",
    "TIME_FACTOR",
    "TIME_FLOOR_S",
    "Lap",
    "Price",
    "TimeLog",
    "TimeVerdict",
    "cpu_share",
    "price_left",
    "recent_ratio",
    "time_verdict",
]

"""The pieces a lab's heads run in: one batched pass each, run one after another, so that a Stop waits for one pass at
most and keeps every pass that ended.

The sweep (:mod:`attnviz.labs.heads_matter.ablation`) and exact patching (:mod:`attnviz.labs.heads_matter.patching`)
each price their own passes (a pass timed here, from the first layer and from the last); this module cuts their heads
into pieces and runs them, a progress step per head and a time-log lap per pass, its price beside what it took.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext

from attnviz.core.progress import Progress, or_none
from attnviz.core.time_agreement import TimeLog
from attnviz.labs.heads_matter.common import Head

PASS_SECONDS = 2.0  # a sweep's pass ablates fewer rows when one row takes long: a Stop waits for one pass at most
BATCHED_TOKENS = 256  # ... but never fewer than this many tokens a pass: a short row's time is mostly fixed cost


def cut_pieces(heads: Sequence[Head], rows_at: Callable[[Head], int]) -> list[list[Head]]:
    """``heads`` in order, a piece (one batched pass) each ``rows_at(its first head)`` heads long (at least 1)."""
    found, start = [], 0
    while start < len(heads):
        size = rows_at(heads[start])
        if size < 1:
            raise ValueError(f"a pass of {size} rows")
        found.append(list(heads[start : start + size]))
        start += size
    return found


def run_passes(
    pieces: Sequence[Sequence[Head]],
    run: Callable[[Sequence[Head]], object],
    progress: Progress | None,
    label: str,
    total: int,
    price: Callable[[Sequence[Head]], float] | None = None,
    log: TimeLog | None = None,
) -> None:
    """``run(piece)`` for each of ``pieces`` in order (the caller keeps what each returns, so a stop keeps the passes
    that ended). ``progress``: a stage ``label`` of ``total`` heads, those not in ``pieces`` counted as done, a step
    per head, priced at its pass's ``price`` shared among its heads; ``log``: a lap per pass (when priced), from its
    earliest head's layer, its price beside what it took."""
    progress = or_none(progress)
    prices = None if price is None else [price(piece) / len(piece) for piece in pieces for _ in piece]
    progress.stage(label, total, done=total - sum(map(len, pieces)), prices=prices)
    for piece in pieces:
        timed = log is not None and price is not None
        with log.part(min(layer for layer, _ in piece), price(piece)) if timed else nullcontext():
            run(piece)
        progress.step(len(piece))

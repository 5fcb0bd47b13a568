"""One patching request as ``attnviz patch`` and the notebook's ``patching`` run it: the heads asked for (and, with
the estimate, its top heads confirmed), the first pass timed so that the whole is predicted before it runs
(:func:`start_patching`: the caller refuses it over its budget, in its own words), then the rest
(:func:`finish_patching`), and the ``--json`` object (:func:`patch_json`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from attnviz.core.progress import Progress
from attnviz.labs.heads_matter import attribution, patching
from attnviz.labs.heads_matter.common import Head
from attnviz.models.source import AttentionSource


@dataclass(eq=False)
class StartedPatching:
    """A request after its timed first passes: ``heads`` to patch (the estimate's confirmed heads added),
    ``seconds`` the whole predicted from those passes, ``pieces`` and ``position_passes`` how many passes it takes
    (a caller says it will take a while when there is more than one); what the first passes found is kept."""

    heads: list[Head]
    estimate: object | None
    confirmed: list[Head]
    positions_head: Head | None
    start: float
    seconds: float
    pieces: int
    position_passes: int
    values: dict = field(default_factory=dict)
    at_positions: dict = field(default_factory=dict)


def start_patching(
    source: AttentionSource,
    pair: patching.RunPair,
    heads: Sequence[Head],
    *,
    estimate_texts: tuple[str, str] | None = None,
    positions_head: Head | None = None,
) -> StartedPatching:
    """The estimate when ``estimate_texts`` (clean, corrupt) are given, its top heads added to ``heads``; then the
    first piece of heads patched and (with ``positions_head``) that head's first positions, each timed, the rest of
    the request predicted from them."""
    heads = list(heads)
    estimate, confirmed = None, []
    if estimate_texts is not None:
        estimate = attribution.estimate_patching(source, pair, *estimate_texts)
        confirmed = patching.confirm(estimate)
        heads = heads + [head for head in confirmed if head not in heads]
    start = time.perf_counter()
    values: dict = {}
    pieces = patching.patch_pieces(heads, patching.patch_rows(pair))
    values.update(patching.patch_piece(source, pair, pieces[0]))  # timed: the rest predicted from it
    seconds = (time.perf_counter() - start) * len(pieces)
    at_positions: dict = {}
    if positions_head is not None:  # its first pass timed too: the rest predicted from it
        timed = time.perf_counter()
        first = list(range(min(patching.patch_rows(pair), pair.n_tokens)))
        found = patching.patch_position_sets(source, pair, positions_head, [[p] for p in first])
        at_positions.update(zip(first, found, strict=True))
        seconds += (time.perf_counter() - timed) * patching.position_passes(pair)
    return StartedPatching(
        heads=heads,
        estimate=estimate,
        confirmed=confirmed,
        positions_head=positions_head,
        start=start,
        seconds=seconds,
        pieces=len(pieces),
        position_passes=patching.position_passes(pair),
        values=values,
        at_positions=at_positions,
    )


def finish_patching(
    source: AttentionSource, pair: patching.RunPair, started: StartedPatching, progress: Progress | None = None
) -> tuple[patching.PatchResult, patching.PositionsResult | None]:
    """The rest of a started request: every head patched (``progress`` told of each), and the positions' head at
    each of its positions where one was asked."""
    patching.patch_heads(source, pair, started.heads, progress, done=started.values)
    result = patching.patch_result(pair, started.values, time.perf_counter() - started.start, started.estimate)
    by_position = None
    if started.positions_head is not None:
        by_position = patching.patch_positions(source, pair, started.positions_head, done=started.at_positions)
    return result, by_position


def patch_json(
    result: patching.PatchResult,
    tokens: list[str],
    confirmed: Sequence[Head],
    by_position: patching.PositionsResult | None,
) -> dict:
    """``attnviz patch --json``'s object: the result, the clean text's ``tokens`` as the model read them, the
    estimate's confirmed heads ("L.H") and the positions' result."""
    value = result.to_json()
    value["tokens"] = tokens
    if value["estimate"] is not None:
        value["estimate"]["confirmed"] = [f"{layer}.{head}" for layer, head in confirmed]
    if by_position is not None:
        value["positions"] = by_position.to_json()
    return value

"""The tour's pitfalls, measured: the numbers its steps state, from the labs each pitfall's page uses.

Each function reads what a lab already computed (the Training page's three runs, the Cost page's measurement,
the Mask lab's leak test, a capture's statistics) and returns the number, or a sentence with it as a message
(:func:`attnviz.i18n.message.msg`: the app words it in the reader's language). Where the tutorial's wording is
not what the measurement shows (memory "grows exponentially"; 1/√d_model "gets the loss stuck"), the sentence
says what was measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from attnviz.core.head_stats import SATURATED_MAX_WEIGHT, SINK_FIRST_TOKEN
from attnviz.i18n.message import Message, msg
from attnviz.labs import scaling
from attnviz.labs.cost.paths import path_titles
from attnviz.labs.masks.builder import LabMask
from attnviz.labs.masks.effects import LeakTest
from attnviz.labs.training.report import clearly_worse
from attnviz.labs.training.runs import TARGET, RunResult
from attnviz.models.record import AttentionRecord

# the large-n end of a path's measurement, where its own fixed overheads (the interpreter, a kernel's workspace)
# no longer hide how it grows: the exponent is fitted over this many of its longest lengths
GROWTH_POINTS = 3
COLLAPSED_SHARE = (
    0.5  # a head has collapsed when at least half its rows put >= SATURATED on one key (the Scaling page's)
)


def growth_exponent(rows: Sequence[dict], path: str, metric: str = "peak_mb", points: int = GROWTH_POINTS) -> float:
    """How ``metric`` grows with the length on ``path``: the least-squares slope of log(metric) against
    log(tokens) over the path's ``points`` longest lengths (2 for n², 1 for n). ``rows``: the Cost lab's
    measurement (``{"path", "tokens", metric}``). ValueError for fewer than two lengths or a non-positive value."""
    mine = sorted((r for r in rows if r["path"] == path), key=lambda r: r["tokens"])[-points:]
    if len(mine) < 2:
        raise ValueError(f"the {path} path needs at least two measured lengths to fit a growth, not {len(mine)}")
    if any(r[metric] <= 0 for r in mine):
        raise ValueError(f"{metric} must be positive to fit its growth on log axes: {[r[metric] for r in mine]}")
    x = np.log([r["tokens"] for r in mine])
    y = np.log([r[metric] for r in mine])
    return float(np.polyfit(x, y, 1)[0])


def memory_number(rows: Sequence[dict], path: str) -> Message:
    """The memory step's number: how the path's peak memory grows, fitted, and from what to what."""
    mine = sorted((r for r in rows if r["path"] == path), key=lambda r: r["tokens"])[-GROWTH_POINTS:]
    return msg(
        "tour_step.pitfall_memory.number",
        path=path_titles()[path],
        exponent=growth_exponent(rows, path),
        n0=mine[0]["tokens"],
        n1=mine[-1]["tokens"],
        mb0=mine[0]["peak_mb"],
        mb1=mine[-1]["peak_mb"],
    )


def memory_row(rows: Sequence[dict]) -> Message:
    """The pitfalls table's line: naive against the fused kernel, both fitted."""
    return msg(
        "tour_step.pitfall_memory.row",
        naive=growth_exponent(rows, "naive"),
        fused=growth_exponent(rows, "fused"),
    )


def by_scale(results: Sequence[RunResult]) -> dict[str, RunResult]:
    return {r.scale: r for r in results}


def scale_number(results: Sequence[RunResult], kind: str) -> Message:
    """The scale step's number for run ``kind``: its held-out loss and accuracy, and when it reached the target."""
    run = by_scale(results)[kind]
    step = run.steps_to_target
    reached = (
        msg("tour_step.pitfall_scale.reached", target=TARGET, step=step)
        if step is not None
        else msg("tour_step.pitfall_scale.never", target=TARGET, steps=run.steps_done)
    )
    return msg(
        "tour_step.pitfall_scale.number",
        scale=scaling.scale_titles()[kind],
        loss=run.final_loss,
        accuracy=run.final_accuracy,
        reached=reached,
    )


def scale_finding(results: Sequence[RunResult]) -> Message:
    """What the runs say of the tutorial's claim that a wrong scale gets the loss stuck: no scale, then
    1/√d_model, each against 1/√d_k, as measured (stuck, late, or no worse)."""
    runs = by_scale(results)
    dk, none, dm = runs["sqrt_dk"], runs["none"], runs["sqrt_dmodel"]

    def verdict(run: RunResult) -> str:
        if not clearly_worse(run, dk):
            return "level"
        return "late" if run.steps_to_target is not None else "stuck"

    def steps(run: RunResult) -> Message:
        if run.steps_to_target is None:
            return msg("tour_step.pitfall_scale.steps_never", target=TARGET)
        return msg("tour_step.pitfall_scale.steps", n=run.steps_to_target, target=TARGET)

    return msg(
        "tour_step.pitfall_scale.finding",
        none=msg(f"tour_step.pitfall_scale.verdict_{verdict(none)}"),
        dmodel=msg(f"tour_step.pitfall_scale.verdict_{verdict(dm)}"),
        none_accuracy=none.final_accuracy,
        dm_accuracy=dm.final_accuracy,
        dk_accuracy=dk.final_accuracy,
        none_steps=steps(none),
        dm_steps=steps(dm),
        dk_steps=steps(dk),
    )


def scale_row(results: Sequence[RunResult]) -> Message:
    """The pitfalls table's line: no scale against 1/√d_k, accuracy and loss at the end."""
    runs = by_scale(results)
    dk, none = runs["sqrt_dk"], runs["none"]
    return msg(
        "tour_step.pitfall_scale.row",
        none_loss=none.final_loss,
        none_accuracy=none.final_accuracy,
        dk_loss=dk.final_loss,
        dk_accuracy=dk.final_accuracy,
    )


def decode_queries(n_tokens: int) -> int:
    """The decode step the mask step builds: the text's last half as one chunk of queries over a cache of the
    rest (at least 2 queries: with one, a mask offset by one reaches past the last key and leaks nothing)."""
    if n_tokens < 3:
        raise ValueError(f"a decode step of 2 queries over a cache needs a text of at least 3 tokens, not {n_tokens}")
    return min(n_tokens - 1, max(2, n_tokens // 2))


def leaking_cells(lab: LabMask, meant: torch.Tensor) -> torch.Tensor:
    """bool (T, T): the cells ``lab`` keeps that ``meant`` hides (the future it lets a query see)."""
    return lab.keep & ~meant


def hidden_cells(lab: LabMask, meant: torch.Tensor) -> torch.Tensor:
    """bool (T, T): the cells ``meant`` keeps that ``lab`` hides (the past a query wrongly loses)."""
    return meant & ~lab.keep


def leak_number(leak: LeakTest, lab: LabMask, meant: torch.Tensor) -> Message:
    """The mask step's number: the rows whose output moved when later tokens changed, the largest move, and the
    cells the mask gets wrong either way."""
    leaked = len(leak.leaked_rows)
    return msg(
        "tour_step.pitfall_mask.number",
        rows=leaked,
        tested=len(leak.tested_rows),
        change=leak.max_change,
        future=int(leaking_cells(lab, meant).sum()),
        hidden=int(hidden_cells(lab, meant).sum()),
    )


def collapsed_heads(
    record: AttentionRecord,
    multiple: float,
    head_dim: int,
    d_model: int,
    threshold: float = scaling.SATURATED,
    *,
    device: torch.device | str | None = None,
) -> int:
    """Heads that put >= ``threshold`` on one key in at least half their rows under ``multiple`` x 1/√d_k
    (:func:`attnviz.labs.scaling.head_row_stats`, head by head): at 1x the Scaling page's count under 1/√d_k,
    at √d_k x its count without a scale."""
    factor = scaling.scale_factors(head_dim, d_model)["sqrt_dk"] * multiple
    return sum(
        scaling.head_row_stats(record, layer, head, factor, threshold, device=device)["saturated_share"]
        >= COLLAPSED_SHARE
        for layer in range(record.n_layer)
        for head in range(record.n_head)
    )


@dataclass(frozen=True)
class Collapse:
    """What collapsed heads are, at the model's own scale: ``saturated`` heads flagged (mean max weight >=
    SATURATED_MAX_WEIGHT), of which ``sinks`` put >= SINK_FIRST_TOKEN on the first token; ``head`` (layer, head)
    the most saturated sink (None: no sink); its weight on the first token and, where the record kept value norms,
    that token's value norm over the median token's (``norm_ratio``) and what the head writes per row, Σ_j α_ij
    ‖v_j W_O‖, over the median token's value norm (``written``: 1 = as much as one typical token's value)."""

    n_heads: int
    saturated: int
    sinks: int
    head: tuple[int, int] | None
    first_weight: float = math.nan
    written: float = math.nan
    norm_ratio: float = math.nan


def collapse(record: AttentionRecord) -> Collapse:
    """The record's statistics' flags, and the value-weighted view of its most saturated sink head."""
    stats = record.statistics
    saturated = stats[stats["max_weight"] >= SATURATED_MAX_WEIGHT]
    sinks = saturated[saturated["first_token_weight"] >= SINK_FIRST_TOKEN]
    if sinks.empty:
        return Collapse(len(stats), len(saturated), 0, None)
    top = sinks.sort_values("max_weight", ascending=False).iloc[0]
    layer, head = int(top["layer"]), int(top["head"])
    live = record.live_rows()[layer]  # (T,): rows with a choice
    weights = record.weights(layer, head)  # (T, T)
    first_weight = float(weights[live, 0].mean()) if live.any() else math.nan
    if not record.has_value_norms:
        return Collapse(len(stats), len(saturated), len(sinks), (layer, head), first_weight)
    moved = record.value_weighted(layer, head)  # (T, T): what each key adds to the row's output, in norm
    norms = record.value_norms(layer, head)  # (T,)
    typical = norms.median().clamp_min(1e-30)
    ratio = float(norms[0] / typical)
    written = moved.sum(dim=-1) / typical  # (T,): the row's output, at most, in typical tokens' values
    return Collapse(
        len(stats),
        len(saturated),
        len(sinks),
        (layer, head),
        first_weight,
        written=float(written[live].mean()) if live.any() else math.nan,
        norm_ratio=ratio,
    )


def collapse_number(collapsed: int, n_heads: int, multiple: float) -> Message:
    return msg("tour_step.pitfall_collapse.number", n=collapsed, total=n_heads, multiple=multiple)


def collapse_finding(found: Collapse) -> Message:
    """The sink finding, with its numbers: most collapsed heads of a trained model attend to the first token,
    and what they add from it."""
    if found.head is None:
        return msg("tour_step.pitfall_collapse.no_sink", saturated=found.saturated, total=found.n_heads)
    layer, head = found.head
    fields = {"saturated": found.saturated, "sinks": found.sinks, "total": found.n_heads, "layer": layer, "head": head}
    if math.isnan(found.written):
        return msg("tour_step.pitfall_collapse.sinks_no_norms", weight=found.first_weight, **fields)
    return msg(
        "tour_step.pitfall_collapse.sinks",
        weight=found.first_weight,
        ratio=found.norm_ratio,
        written=found.written,
        **fields,
    )


def collapse_row(found: Collapse, at_none: int, at_one: int) -> Message:
    """The pitfalls table's line: heads collapsed without the scale and with it, and how many flagged heads are
    sinks."""
    return msg(
        "tour_step.pitfall_collapse.row",
        at_none=at_none,
        at_one=at_one,
        total=found.n_heads,
        saturated=found.saturated,
        sinks=found.sinks,
    )


__all__ = [
    "COLLAPSED_SHARE",
    "GROWTH_POINTS",
    "Collapse",
    "collapse",
    "collapse_finding",
    "collapse_number",
    "collapse_row",
    "collapsed_heads",
    "decode_queries",
    "growth_exponent",
    "hidden_cells",
    "leak_number",
    "leaking_cells",
    "memory_number",
    "memory_row",
    "scale_finding",
    "scale_number",
    "scale_row",
]

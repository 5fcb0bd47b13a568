"""The tutorial's "too many heads on small data" pitfall, trained live: one layer at a fixed width, several head
counts, a small fixed training set.

The tutorial says that many heads trained on little data end up redundant (several heads attend alike) and that
the fix is fewer heads. This sweep tests both halves. It trains the Training lab's model (key-value retrieval,
one :class:`~attnviz.core.attention.MultiHeadAttention`, :mod:`attnviz.labs.training.runs`) at one d_model with
each head count in turn (head_dim = d_model / n_head, so the weights are the same size whatever n_head is), on
:attr:`SweepConfig.train_sequences` sequences seen again each epoch, and measures each trained model on the same
held-out sequences: its loss and accuracy, and how alike its heads attend (the Jensen–Shannon distance between
every two heads' weights over the held-out queries, :func:`attnviz.labs.head_roles.similarity.js_distance_matrix`,
the Head roles page's measure; heads at distance ≤ ``REDUNDANT_DISTANCE`` attend alike).

What it finds with the defaults (seeds 0, 1 and 2 alike): more heads do hurt on 256 sequences (held-out loss
0.09 with one head, 1.6 with eight), but not by redundancy: no two heads attend alike, and the heads grow *more*
different as they get narrower (mean distance 0.37 with two heads, 0.62 with eight) while each puts less weight on
the answer. Redundancy shows in what the heads do, not in where they look: taken out one at a time
(:func:`head_ablation`), 3 of the 8 heads leave the held-out loss no higher. With 1,024 sequences every head count
learns the task. The sentences the tour shows are chosen from what the sweep measured (:func:`sweep_finding`), so
a change of task or seed that finds redundancy says so.

Deterministic: the same config gives the same numbers (every run is seeded: weights, data and their order).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from attnviz import settings
from attnviz.core.admission import Need
from attnviz.core.budget import training_seconds
from attnviz.core.progress import Progress, or_none
from attnviz.i18n.message import Message, msg
from attnviz.labs.head_roles.similarity import (
    REDUNDANT_DISTANCE,
    HeadSimilarity,
    average_linkage,
    js_distance_matrix,
    leaf_order,
)
from attnviz.labs.training.runs import (
    RetrievalBatch,
    RetrievalModel,
    TrainingConfig,
    evaluate,
    scale_for,
    train_kept,
    training_nbytes,
    variant_macs,
)

SCALE_KIND = "sqrt_dk"  # every run is scaled right: the sweep is about the heads, not the scale
# A step of these small runs is bound by torch's per-call overhead, not by arithmetic: measured 1.3 ms a step on
# this project's 2-core machine (d_model 64, batch 32), priced a little above that; the multiply-adds come on top
STEP_SECONDS = 2.0e-3
# a head is "removable" when taking it out raises the held-out loss by at most this: one unit of the two decimals
# the step states its losses in (the tutorial's "can be removed with no loss change", at the precision shown)
REMOVABLE_RISE = 0.01


@dataclass(frozen=True)
class SweepConfig:
    """The sweep's one layer width, its head counts and the small task it trains on; the rest as
    :class:`~attnviz.labs.training.runs.TrainingConfig` (which validates every run's values).

    The task is smaller than the Training page's (8 pairs of 32 keys, not 32 of 128), so that 256 sequences are
    enough for one head to learn it (97 % held-out) and the head count is what decides; Adam, so that every head
    count trains in the same few hundred steps.
    """

    d_model: int = 64
    n_heads: tuple[int, ...] = (1, 2, 4, 8)
    train_sequences: int = 256
    steps: int = 600
    pairs: int = 8
    keys: int = 32
    values: int = 16
    batch: int = 32
    optimiser: str = "adam"
    learning_rate: float = 3e-3
    seed: int = settings.SEED.default
    threshold: float = REDUNDANT_DISTANCE

    def __post_init__(self) -> None:
        if not self.n_heads or list(self.n_heads) != sorted(set(self.n_heads)):
            raise ValueError(f"n_heads {self.n_heads} must be distinct and increasing")
        for n_head in self.n_heads:
            if n_head < 1 or self.d_model % n_head:
                raise ValueError(f"n_head {n_head} must divide d_model {self.d_model}")
            self.run_config(n_head)  # every run's values checked now, not halfway through the sweep

    def run_config(self, n_head: int) -> TrainingConfig:
        """The training of one head count: the same task, data and seed as every other."""
        return TrainingConfig(
            head_dim=self.d_model // n_head,
            n_head=n_head,
            steps=self.steps,
            learning_rate=self.learning_rate,
            optimiser=self.optimiser,
            seed=self.seed,
            pairs=self.pairs,
            keys=self.keys,
            values=self.values,
            batch=self.batch,
            train_sequences=self.train_sequences,
        )


def sweep_seconds(config: SweepConfig) -> float:
    """The sweep's predicted time on this machine: each run's steps at :data:`STEP_SECONDS` plus its multiply-adds
    at the training lab's rate (:func:`attnviz.core.budget.training_seconds`)."""
    runs = [config.run_config(n) for n in config.n_heads]
    return sum(c.steps * STEP_SECONDS + training_seconds(variant_macs(c)) for c in runs)


def sweep_need(config: SweepConfig) -> Need:
    """What :func:`heads_sweep` costs: one run at a time (each run's memory is the training lab's bound for three,
    an upper bound), on the CPU."""
    nbytes = max(training_nbytes(config.run_config(n)) for n in config.n_heads)
    return Need(nbytes, sweep_seconds(config), 0, "cpu")


@torch.no_grad()
def head_patterns(model: RetrievalModel, data: RetrievalBatch, scale: float) -> Tensor:
    """Each head's weights on the held-out queries: (n_head, sequences, pairs), one row per query."""
    _, weights = model(data, scale, need_weights=True)  # (sequences, n_head, 1, pairs)
    return weights[:, :, 0, :].transpose(0, 1).contiguous()  # (n_head, sequences, pairs)


def patterns_similarity(patterns: Tensor) -> HeadSimilarity:
    """Every two heads of one layer compared (JS distance over the rows), clustered, as the Head roles page does
    for a record's heads: (n_head, R, K) weights -> :class:`HeadSimilarity` (labels "L0 H<h>")."""
    distance = js_distance_matrix(patterns).cpu().numpy()
    merges = average_linkage(distance)
    note = msg("tour_step.pitfall_heads.similarity_note", rows=patterns.shape[1])
    return HeadSimilarity(distance, merges, leaf_order(merges, len(distance)), len(distance), note)


@torch.no_grad()
def head_ablation(model: RetrievalModel, data: RetrievalBatch, scale: float) -> tuple[float, ...]:
    """How much the held-out loss rises when each head is taken out (its output zeroed before W_o, on a copy of the
    model): one value per head, negative where the model does better without it."""
    attention = model.attention
    head_dim = attention.w_o.in_features // attention.n_head
    base = evaluate(model, data, scale).loss
    rises = []
    for head in range(attention.n_head):
        without = copy.deepcopy(model)
        without.attention.w_o.weight[:, head * head_dim : (head + 1) * head_dim] = 0.0  # (d_model, n_head*head_dim)
        rises.append(evaluate(without, data, scale).loss - base)
    return tuple(rises)


def alike_pairs(distance: np.ndarray, threshold: float = REDUNDANT_DISTANCE) -> int:
    """How many pairs of heads attend alike: distance ≤ ``threshold``, each pair counted once."""
    upper = np.triu_indices(len(distance), 1)
    return int((distance[upper] <= threshold).sum())


@dataclass(frozen=True)
class SweepPoint:
    """One head count, trained: its held-out loss and accuracy, its heads compared (``similarity``), the mean weight
    its heads put on the pair holding the answer, what taking out each head does to the held-out loss
    (``ablation``: its rise, one per head) and the run's seconds."""

    n_head: int
    loss: float
    accuracy: float
    answer_weight: float
    similarity: HeadSimilarity
    alike: int  # pairs of heads at distance <= the sweep's threshold
    ablation: tuple[float, ...]
    seconds: float

    @property
    def removable(self) -> int:
        """Heads whose removal alone leaves the held-out loss no higher (within :data:`REMOVABLE_RISE`)."""
        return sum(rise <= REMOVABLE_RISE for rise in self.ablation) if self.n_head > 1 else 0

    @property
    def pairs(self) -> int:
        return self.n_head * (self.n_head - 1) // 2

    @property
    def mean_distance(self) -> float:
        """The mean distance between two heads (NaN for one head: nothing to compare)."""
        d = self.similarity.distance
        return float(d[np.triu_indices(len(d), 1)].mean()) if self.pairs else math.nan

    @property
    def closest(self) -> tuple[int, int, float] | None:
        """The two heads that attend most alike and their distance (None for one head)."""
        if not self.pairs:
            return None
        d = self.similarity.distance.copy()
        np.fill_diagonal(d, np.inf)
        a, b = np.unravel_index(np.argmin(d), d.shape)
        return int(min(a, b)), int(max(a, b)), float(d[a, b])


@dataclass(frozen=True)
class HeadsSweep:
    config: SweepConfig
    points: tuple[SweepPoint, ...]

    @property
    def nbytes(self) -> int:
        return sum(p.similarity.nbytes for p in self.points)

    def point(self, n_head: int) -> SweepPoint:
        for p in self.points:
            if p.n_head == n_head:
                return p
        raise KeyError(f"n_head {n_head} is not in the sweep {self.config.n_heads}")

    def table(self) -> pd.DataFrame:
        """One row per head count: n_head, loss, accuracy, alike (pairs), pairs, mean_distance, closest (the
        smallest distance between two heads), answer_weight, removable (heads), seconds."""
        return pd.DataFrame(
            [
                {
                    "n_head": p.n_head,
                    "loss": p.loss,
                    "accuracy": p.accuracy,
                    "alike": p.alike,
                    "pairs": p.pairs,
                    "mean_distance": p.mean_distance,
                    "closest": p.closest[2] if p.closest else math.nan,
                    "answer_weight": p.answer_weight,
                    "removable": p.removable,
                    "seconds": p.seconds,
                }
                for p in self.points
            ]
        )


def heads_sweep(config: SweepConfig | None = None, progress: Progress | None = None) -> HeadsSweep:
    """Train one model per head count (:func:`~attnviz.labs.training.runs.train_kept`, one after another) and
    measure each on the held-out sequences; ``progress`` gets a step per head count."""
    config = config or SweepConfig()
    progress = or_none(progress)
    progress.stage("progress.step", len(config.n_heads))
    points = []
    for n_head in config.n_heads:
        started = time.perf_counter()
        run_config = config.run_config(n_head)
        run = train_kept(run_config, SCALE_KIND)
        scale = scale_for(SCALE_KIND, run_config.head_dim, run_config.d_model)
        similarity = patterns_similarity(head_patterns(run.model, run.held_out, scale))
        ablation = head_ablation(run.model, run.held_out, scale)
        points.append(
            SweepPoint(
                n_head=n_head,
                loss=run.result.final_loss,
                accuracy=run.result.final_accuracy,
                answer_weight=run.result.attention_end.answer_weight,
                similarity=similarity,
                alike=alike_pairs(similarity.distance, config.threshold),
                ablation=ablation,
                seconds=time.perf_counter() - started,
            )
        )
        progress.step()
    return HeadsSweep(config, tuple(points))


def sweep_number(sweep: HeadsSweep, n_head: int) -> Message:
    """What the sweep measured at ``n_head``, beside the fewest heads (the fix): pairs alike and held-out loss."""
    p, fewest = sweep.point(n_head), sweep.points[0]
    common = {
        "train": sweep.config.train_sequences,
        "loss": p.loss,
        "accuracy": p.accuracy,
        "threshold": sweep.config.threshold,
        "fewest": fewest.n_head,
        "fewest_loss": fewest.loss,
        "fewest_accuracy": fewest.accuracy,
    }
    if p.n_head == fewest.n_head:
        most = sweep.points[-1]
        return msg(
            "tour_step.pitfall_heads.number_fewest",
            n_head=p.n_head,
            most=most.n_head,
            most_alike=most.alike,
            most_pairs=most.pairs,
            most_loss=most.loss,
            most_accuracy=most.accuracy,
            **common,
        )
    return msg(
        "tour_step.pitfall_heads.number",
        n_head=p.n_head,
        alike=p.alike,
        pairs=p.pairs,
        closest=p.closest[2],
        removable=p.removable,
        rise=REMOVABLE_RISE,
        **common,
    )


def clearly_worse(point: SweepPoint, reference: SweepPoint) -> bool:
    """Whether ``point`` ended measurably worse on the held-out set: a loss over twice the reference's and at
    least 0.05 above it, or an accuracy at least 2 points lower (the training lab's test, a little coarser)."""
    if not math.isfinite(point.loss):
        return True
    higher = point.loss > 2 * reference.loss and point.loss - reference.loss >= 0.05
    return higher or point.accuracy <= reference.accuracy - 0.02


def sweep_finding(sweep: HeadsSweep) -> Message:
    """What the sweep shows about the tutorial's claim, with its numbers: the most heads against the fewest.

    Four outcomes, each said as measured: harm with redundancy (the tutorial's picture), harm without it, redundancy
    without harm, neither."""
    fewest, most = sweep.points[0], sweep.points[-1]
    worse, redundant = clearly_worse(most, fewest), most.alike > 0
    second = sweep.points[1] if len(sweep.points) > 1 else most
    numbers = {
        "train": sweep.config.train_sequences,
        "most": most.n_head,
        "fewest": fewest.n_head,
        "loss": most.loss,
        "fewest_loss": fewest.loss,
        "accuracy": most.accuracy,
        "fewest_accuracy": fewest.accuracy,
        "alike": most.alike,
        "pairs": most.pairs,
        "threshold": sweep.config.threshold,
        "two": second.n_head,
        "two_distance": second.mean_distance,
        "distance": most.mean_distance,
        "answer": most.answer_weight,
        "fewest_answer": fewest.answer_weight,
        "removable": most.removable,
        "rise": REMOVABLE_RISE,
    }
    if worse and redundant:
        return msg("tour_step.pitfall_heads.finding_both", **numbers)
    if worse:
        return msg("tour_step.pitfall_heads.finding_harm_only", **numbers)
    if redundant:
        return msg("tour_step.pitfall_heads.finding_redundant_only", **numbers)
    return msg("tour_step.pitfall_heads.finding_neither", **numbers)


def sweep_row(sweep: HeadsSweep) -> Message:
    """The pitfalls table's one line: the most heads against the fewest, held-out loss and heads alike."""
    fewest, most = sweep.points[0], sweep.points[-1]
    numbers = {
        "train": sweep.config.train_sequences,
        "most": most.n_head,
        "fewest": fewest.n_head,
        "loss": most.loss,
        "fewest_loss": fewest.loss,
        "alike": most.alike,
        "pairs": most.pairs,
    }
    if clearly_worse(most, fewest):
        return msg("tour_step.pitfall_heads.row_harm", **numbers)
    return msg("tour_step.pitfall_heads.row_no_harm", **numbers)


__all__ = [
    "REMOVABLE_RISE",
    "STEP_SECONDS",
    "HeadsSweep",
    "SweepConfig",
    "SweepPoint",
    "alike_pairs",
    "clearly_worse",
    "head_ablation",
    "head_patterns",
    "heads_sweep",
    "patterns_similarity",
    "sweep_finding",
    "sweep_need",
    "sweep_number",
    "sweep_row",
    "sweep_seconds",
]

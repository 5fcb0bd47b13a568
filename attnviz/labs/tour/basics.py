"""The numbers the tour's first steps state (intuition, the three steps, the scale, the code), read from what the
Heads, Walkthrough and Scaling pages compute: a record, a walkthrough of one layer, the Scaling rows.

Nothing here runs a model: every function reads a result a page already made, so the tour's number and the
page's are the same number. The rules that choose what a step shows first (which head, which query) are here too,
so a test can check them and a reader's step is the same on every visit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from attnviz.labs import scaling
from attnviz.labs.walkthrough.steps import Walkthrough

SUB_STEPS = ("scores", "scale", "softmax", "weighted")  # the tutorial's three steps, the scale its own: QKᵀ, ÷√d_k, ...
TOP_KEYS = 3  # the keys a query's sentence names, largest weight first
HALF = 0.5  # a head "collapses" when at least this share of its rows put ≥ SATURATED on one key (Scaling's rule)


def clear_head(statistics: pd.DataFrame) -> tuple[int, int]:
    """The head the intuition step opens on: the one that puts the most weight on the previous token, on average.

    A previous-token head is the clearest pattern a reader can check by eye (each token looks one back) and,
    unlike a sink head (everything on token 0), its rows still spread some weight: a weighted average to read.
    ``statistics``: a record's per-head table (columns layer, head, prev_token_weight); ties go to the first, and
    so does a text with no row to average (one token: every statistic NaN)."""
    best = statistics.loc[statistics["prev_token_weight"].fillna(-math.inf).idxmax()]
    return int(best["layer"]), int(best["head"])


@dataclass(frozen=True)
class RowStory:
    """One query's row of weights told as a sentence: its ``top`` keys (index, weight), largest first, and the
    row's sum (1 up to rounding: a softmax)."""

    query: int
    top: list[tuple[int, float]]
    total: float


def row_story(weights: Tensor, query: int, visible: Tensor | None = None, top: int = TOP_KEYS) -> RowStory:
    """The keys query ``query`` weighs most: ``weights`` (q_len, k_len), 0 where masked; ``visible`` (q_len,
    k_len) bool, the keys it may see (None: all). At most ``top`` keys, never a masked one."""
    row = weights[query].double()  # (k_len,)
    seen = row if visible is None else row.masked_fill(~visible[query].bool(), -math.inf)
    n = min(top, int(torch.isfinite(seen).sum()))
    values, keys = seen.topk(n)
    return RowStory(query, [(int(k), float(v)) for k, v in zip(keys, values, strict=True)], float(row.sum()))


@dataclass(frozen=True)
class SubStepNumbers:
    """One query row of one head through the scaled dot-product: the raw scores' range (visible keys), the range
    after the scale, the softmax's largest weight and its key, the output row's norm, and how close the steps'
    output and weights are to the layer's own forward (the Walkthrough page's two metrics)."""

    raw_low: float
    raw_high: float
    scale: float
    scaled_low: float
    scaled_high: float
    max_weight: float
    top_key: int
    out_norm: float
    output_diff: float
    weights_diff: float


def sub_step_numbers(walk: Walkthrough, head: int, query: int) -> SubStepNumbers:
    """:class:`SubStepNumbers` of row ``query`` of head ``head``, read from the walkthrough's own tensors."""
    raw = walk.step("scores").tensors["scores"][0, head, query].double()  # (T,)
    scaled = walk.step("scale").tensors["scores"][0, head, query].double()  # (T,)
    weights = walk.step("softmax").tensors["weights"][0, head, query].double()  # (T,)
    out = walk.step("weighted").tensors["out"][0, head, query].double()  # (head_dim,)
    seen = torch.ones_like(raw, dtype=torch.bool) if walk.mask is None else walk.mask[query].bool()
    return SubStepNumbers(
        raw_low=float(raw[seen].min()),
        raw_high=float(raw[seen].max()),
        scale=walk.scale,
        scaled_low=float(scaled[seen].min()),
        scaled_high=float(scaled[seen].max()),
        max_weight=float(weights.max()),
        top_key=int(weights.argmax()),
        out_norm=float(out.norm()),
        output_diff=walk.output_diff,
        weights_diff=walk.weights_diff,
    )


def collapsed_counts(heads: pd.DataFrame) -> dict[str, int]:
    """How many heads put ≥ the threshold on one key in at least half their rows, per scale kind (Scaling's
    ``rows.table(threshold)``: columns ``saturated_share_<kind>``), and ``n_heads``."""
    counts = {kind: int((heads[f"saturated_share_{kind}"] >= HALF).sum()) for kind in scaling.SCALE_KINDS}
    return {**counts, "n_heads": len(heads)}


def scale_head(heads: pd.DataFrame) -> tuple[int, int]:
    """The head the scale step frames: the one whose saturated share the scale changes most (no scale minus
    1/√d_k; ties: the first), the clearest case of what the step is about."""
    change = heads["saturated_share_none"] - heads["saturated_share_sqrt_dk"]
    best = heads.loc[change.fillna(-math.inf).idxmax()]
    return int(best["layer"]), int(best["head"])


def scale_multiples(head_dim: int) -> list[float]:
    """The scale step's choices, as multiples of 1/√d_k: the Scaling page's slider, with √d_k (no scale) added
    where the slider does not hold it."""
    return sorted({*scaling.SLIDER_MULTIPLES, float(math.sqrt(head_dim))})


def vanishing_share(curve: scaling.GradientCurve, multiple: float) -> float | None:
    """The curve's share of rows passing almost no gradient at ``multiple`` (None where it has no such point)."""
    for m, share in zip(curve.multiples, curve.vanishing_share, strict=True):
        if math.isclose(m, multiple, rel_tol=1e-9):
            return share
    return None


def changed_axes(before: tuple[int, ...] | None, after: tuple[int, ...]) -> list[int]:
    """The axes of ``after`` a step of the code made: of the same rank, those whose size differs from ``before``'s;
    of another rank (a split or a merge), those whose size ``before`` does not have, matched left to right
    ((1, T, 576) -> (1, 9, T, 64): axes 1 and 3, n_head and head_dim). None for a step with no ``before``."""
    if before is None:
        return []
    if len(before) == len(after):
        return [i for i, (b, a) in enumerate(zip(before, after, strict=True)) if b != a]
    left = list(before)
    changed = []
    for i, size in enumerate(after):
        if size in left:
            left.remove(size)
        else:
            changed.append(i)
    return changed


def step_shapes(walk: Walkthrough) -> list[tuple[str, tuple[int, ...], list[int]]]:
    """Per step of the walkthrough: its key, the shape of the tensor it shows and the axes that changed from the
    step before's (the previous step's shown tensor; the input ``x`` (batch, seq, d_model) before the first)."""
    rows = []
    before: tuple[int, ...] | None = (1, len(walk.tokens), walk.d_model)
    for step in walk.steps:
        shape = tuple(int(n) for n in step.shapes[step.shown])
        rows.append((step.key, shape, changed_axes(before, shape)))
        before = shape
    return rows


__all__ = [
    "HALF",
    "SUB_STEPS",
    "TOP_KEYS",
    "RowStory",
    "SubStepNumbers",
    "changed_axes",
    "clear_head",
    "collapsed_counts",
    "row_story",
    "scale_head",
    "scale_multiples",
    "step_shapes",
    "sub_step_numbers",
    "vanishing_share",
]

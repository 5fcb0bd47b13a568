"""How well one ranking of heads agrees with another: Spearman's ρ of |effect| and the overlap of the top k (an
estimate against the exact effects)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from attnviz.core.alignment import ranks
from attnviz.labs.ablation import _rounded

TOP_K = 10  # the heads the estimate's ranking is compared on, and confirmed


def by_size(values: Sequence[Sequence[float | None]], k: int | None = None) -> list[tuple[int, int, float]]:
    """A layer x head map's heads by |value|, largest first (ties: the earlier head), those without a value left
    out: [(layer, head, value)], the first ``k``."""
    found = [(layer, head, float(v)) for layer, row in enumerate(values) for head, v in enumerate(row) if v is not None]
    ranked = sorted(found, key=lambda item: (-abs(item[2]), item[0], item[1]))
    return ranked if k is None else ranked[:k]


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's ρ of two equally long sequences (ties given their mean rank); nan when either is constant."""
    ra, rb = ranks(torch.as_tensor(list(a), dtype=torch.float64)), ranks(torch.as_tensor(list(b), dtype=torch.float64))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denominator = float(ra.norm() * rb.norm())
    return math.nan if denominator == 0 else float((ra * rb).sum()) / denominator


def top_overlap(a: Sequence[float], b: Sequence[float], k: int = TOP_K) -> int:
    """How many of the k largest |a| are among the k largest |b| (ties: the earlier first)."""
    order = lambda values: sorted(range(len(values)), key=lambda i: (-abs(values[i]), i))[:k]  # noqa: E731
    return len(set(order(list(a))) & set(order(list(b))))


@dataclass(frozen=True)
class Agreement:
    """The estimate against exact effects on the same heads: Spearman's ρ of |effect| and the top-k overlap."""

    spearman: float
    overlap: int
    k: int
    n_heads: int

    def to_json(self) -> dict:
        return {"spearman": _rounded(self.spearman), "top_overlap": self.overlap, "k": self.k, "n_heads": self.n_heads}


def agreement(
    estimate: Sequence[Sequence[float]], exact: Sequence[Sequence[float | None]], k: int = TOP_K
) -> Agreement:
    """How well ``estimate`` ranks the heads ``exact`` has values for (n_layer × n_head each)."""
    pairs = [
        (e, x)
        for e_row, x_row in zip(estimate, exact, strict=False)
        for e, x in zip(e_row, x_row, strict=False)
        if x is not None and not math.isnan(e)
    ]
    est, ex = [abs(e) for e, _ in pairs], [abs(x) for _, x in pairs]
    k = min(k, len(pairs))
    return Agreement(spearman(est, ex), top_overlap(est, ex, k), k, len(pairs))

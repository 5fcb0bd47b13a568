"""Rank statistics: ranks with ties averaged, and Spearman's rank correlation.

One Spearman for the whole project: cross-attention's monotonicity (:mod:`attnviz.core.alignment`) and how well an
estimate ranks the heads (:mod:`attnviz.labs.heads_matter.agreement`) both use it, and a constant input is
undefined in both (None), each saying so in its own words.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def ranks(values: Tensor) -> Tensor:
    """Ranks 0.. of a 1-D tensor, ties given their average rank (as Spearman's correlation takes them), float64."""
    order = torch.argsort(values, stable=True)
    sorted_values = values[order]
    out = torch.empty(len(values), dtype=torch.float64)
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or sorted_values[end] != sorted_values[start]:
            out[order[start:end]] = (start + end - 1) / 2
            start = end
    return out


def spearman(x: Tensor | Sequence[float], y: Tensor | Sequence[float]) -> float | None:
    """Spearman's ρ of two equally long 1-D tensors or sequences (a sequence is read in float64), ties given their
    mean rank, in [-1, 1]; None where it is undefined: a constant input (every value tied, so no order to compare)
    or fewer than two values. Each caller says what it shows then (the estimate's agreement: null in its JSON, as
    before; cross-attention's monotonicity: 0, as before), so one function answers and no number changes.
    """
    x = x if isinstance(x, Tensor) else torch.as_tensor(list(x), dtype=torch.float64)
    y = y if isinstance(y, Tensor) else torch.as_tensor(list(y), dtype=torch.float64)
    if len(x) < 2:
        return None
    rx, ry = ranks(x), ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = float(rx.norm() * ry.norm())
    return None if denominator == 0 else float((rx * ry).sum()) / denominator

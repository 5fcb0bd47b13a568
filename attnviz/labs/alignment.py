"""The alignment view of an encoder-decoder: cross-attention of chosen heads as a target x source map, the heads
ranked by how monotonic their alignment is, and each target token's most-attended source token.

The measures are :mod:`attnviz.core.alignment`'s; this module reads them off a cross-attention record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from attnviz.core.alignment import hard_alignment
from attnviz.models.record import AttentionRecord

RANKED_HEADS = 10  # heads a page offers from the top of the ranking


def ranked_heads(record: AttentionRecord) -> pd.DataFrame:
    """Every cross-attention head, most monotonic first (ties: sharper first): layer, head, monotonicity,
    coverage, max_weight, entropy_norm."""
    stats = record.statistics[["layer", "head", "monotonicity", "coverage", "max_weight", "entropy_norm"]]
    return stats.sort_values(["monotonicity", "max_weight"], ascending=False, kind="stable").reset_index(drop=True)


@dataclass(frozen=True, eq=False)
class Alignment:
    """The mean cross-attention of ``heads`` ((layer, head) pairs): weights (T, S) over the real source tokens,
    and the hard alignment (T,) read from it; rows of the target's pads are left out (NaN / -1)."""

    heads: tuple[tuple[int, int], ...]
    weights: Tensor
    hard: Tensor


def alignment(record: AttentionRecord, heads: Sequence[tuple[int, int]]) -> Alignment:
    """The alignment of ``heads`` of a cross-attention record (ValueError for none, or a head it does not have)."""
    if not heads:
        raise ValueError("pick at least one head")
    for layer, head in heads:
        if not (0 <= layer < record.n_layer and 0 <= head < record.n_head):
            raise ValueError(f"L{layer} H{head} is not a head of this model ({record.n_layer} x {record.n_head})")
    weights = torch.stack([record.layers[layer].weights[head] for layer, head in heads]).mean(dim=0)  # (T, S)
    n_source = sum(not token.pad for token in record.keys_tokens)
    weights = weights[:, :n_source]
    return Alignment(tuple(heads), weights, hard_alignment(weights))


def alignment_table(record: AttentionRecord, found: Alignment) -> pd.DataFrame:
    """One row per target token: the token, its most-attended source token and that weight."""
    source = record.keys_tokens
    rows = []
    for i, j in enumerate(found.hard.tolist()):
        rows.append(
            {
                "target": f"{i} {record.tokens[i].text}",
                "source": f"{j} {source[j].text}",
                "weight": float(found.weights[i, j]),
            }
        )
    return pd.DataFrame(rows)

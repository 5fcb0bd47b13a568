"""The tour's steps on model design: why several heads, the KV heads a cache keeps, and tiling.

Why several heads (the tutorial's section 4): a head compares a query with the keys in its own 64-dimensional
subspace of q and k. :func:`merge_heads` undoes the split on a real layer: it merges the layer's heads, in groups
of adjacent heads, into fewer wider heads, each scoring over the concatenated subspaces of its group (the sum of
its heads' q·k, scaled by 1/√(group · head_dim)), so one head of 576 dimensions sees everything the 9 saw, in one
softmax. What it loses is measured on the query rows: how many different keys the heads pick as their strongest
(:attr:`HeadMerge.distinct`), and how often a merged head still picks an original head's strongest key
(:attr:`HeadMerge.kept`). With the heads as they are (``n_merged == n_head``) the weights are the model's own.

The KV cache and tiling steps use the KV cache and Cost pages' labs directly; the few helpers here are the tour's
choices (which KV head counts to offer, which key block to frame).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.core.attention import reduction_dtype
from attnviz.models.record import AttentionRecord


def merge_choices(n_head: int) -> list[int]:
    """How many heads a layer of ``n_head`` can be merged into, groups of adjacent heads: the divisors of n_head."""
    return [g for g in range(1, n_head + 1) if n_head % g == 0]


def merged_scores(q: Tensor, k: Tensor, n_merged: int) -> Tensor:
    """Scores of ``n_merged`` heads, each over the concatenated subspaces of n_head / n_merged adjacent heads.

    q: (n_head, T, head_dim), k: (n_kv_head, S, head_dim) (a GQA layer's K heads read by n_head / n_kv_head
    query heads each) -> (n_merged, T, S). Merged head m's q and k are its group's heads' q and k side by side,
    (T, group · head_dim), so its q·k is the sum of its heads' q·k, and its scale 1/√(group · head_dim) is the
    usual one for its width. ValueError when n_merged does not divide n_head.
    """
    n_head, T, head_dim = q.shape
    if n_merged < 1 or n_head % n_merged:
        raise ValueError(f"n_merged ({n_merged}) must divide the layer's n_head ({n_head})")
    group = n_head // n_merged
    wide = reduction_dtype(q.device)
    k = k.repeat_interleave(n_head // k.shape[0], dim=0)  # (n_head, S, hd): the K head each query head reads
    per_head = q.to(wide) @ k.to(wide).transpose(-2, -1)  # (n_head, T, S)
    summed = per_head.reshape(n_merged, group, T, k.shape[1]).sum(dim=1)  # (n_merged, T, S)
    return summed / math.sqrt(group * head_dim)


@dataclass(frozen=True)
class HeadMerge:
    """One layer's heads merged into ``n_merged``: the weights and what the merge kept of the heads' choices.

    weights: (n_merged, T, S), 0 where masked; top: (n_merged, T) each merged head's strongest key per row;
    head_top: (n_head, T) the original heads' strongest keys; rows: bool (T,) the rows compared (live rows that
    see at least two keys: a row with one key has no choice to lose).
    """

    layer: int
    n_head: int
    n_merged: int
    head_dim: int
    weights: Tensor
    top: Tensor
    head_top: Tensor
    rows: Tensor

    @property
    def width(self) -> int:
        """A merged head's dimensions: its group's subspaces side by side."""
        return self.head_dim * self.n_head // self.n_merged

    def distinct(self, row: int, merged: bool = True) -> int:
        """How many different keys the heads pick as their strongest in query ``row`` (the merged heads', or
        with ``merged=False`` the layer's own)."""
        return int((self.top if merged else self.head_top)[:, row].unique().numel())

    def mean_distinct(self, merged: bool = True) -> float:
        """:meth:`distinct` averaged over the compared rows (0.0 without any)."""
        rows = self.rows.nonzero().flatten().tolist()
        return sum(self.distinct(r, merged) for r in rows) / len(rows) if rows else 0.0

    @property
    def kept(self) -> float:
        """The share of (head, row) pairs, over the compared rows, in which the merged head an original head went
        into still picks that head's strongest key: 1.0 with the heads unmerged (0.0 without compared rows)."""
        if not bool(self.rows.any()):
            return 0.0
        group = self.n_head // self.n_merged
        merged_top = self.top.repeat_interleave(group, dim=0)  # (n_head, T): each head's merged head's choice
        same = (merged_top == self.head_top)[:, self.rows]
        return float(same.float().mean())


def merge_heads(record: AttentionRecord, layer: int, n_merged: int) -> HeadMerge:
    """Layer ``layer``'s heads merged into ``n_merged`` (:func:`merged_scores`) under the mask it applied.

    Needs the record's q and k (a source that keeps them); ValueError without them, and for a layer that applied
    a soft cap or a scale other than 1/√head_dim (the merged heads' scale would not be the same rule)."""
    capture = record.layers[layer]
    if capture.q is None or capture.k is None:
        raise ValueError("merging heads needs the record's q and k")
    head_dim = capture.q.shape[-1]
    if capture.softcap is not None or not math.isclose(capture.scale, head_dim**-0.5, rel_tol=1e-6):
        raise ValueError(f"layer {layer} does not score with 1/√head_dim alone: its heads cannot be merged here")
    T, S = capture.q.shape[1], capture.k.shape[1]
    visible = capture.keys.block(0, T, 0, S)  # (T, S) bool
    scores = merged_scores(capture.q, capture.k, n_merged).masked_fill(~visible, -math.inf)  # (n_merged, T, S)
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0).float()  # a row seeing no key: all 0
    own = merged_scores(capture.q, capture.k, capture.q.shape[0]).masked_fill(~visible, -math.inf)
    rows = record.live_rows()[layer] & (visible.sum(dim=-1) >= 2)
    return HeadMerge(
        layer=layer,
        n_head=capture.q.shape[0],
        n_merged=n_merged,
        head_dim=head_dim,
        weights=weights,
        top=scores.argmax(dim=-1),
        head_top=own.argmax(dim=-1),
        rows=rows,
    )


def head_merges(record: AttentionRecord, layer: int) -> dict[int, HeadMerge]:
    """Every merge of layer ``layer`` (:func:`merge_choices`): the step's results, all its settings at once."""
    return {g: merge_heads(record, layer, g) for g in merge_choices(record.n_head)}


def most_varied_layer(record: AttentionRecord) -> int:
    """The step's default layer: the one whose heads pick the most different strongest keys, on average over
    the rows (the earliest of equals); 0 for a record without q and k or rows to compare."""
    best, best_value = 0, -1.0
    if not record.keeps_qk:
        return 0
    for layer in range(record.n_layer):
        value = merge_heads(record, layer, record.n_head).mean_distinct(merged=False)
        if value > best_value + 1e-9:
            best, best_value = layer, value
    return best


def most_varied_row(merge: HeadMerge) -> int:
    """The step's default query row: the compared row whose heads pick the most different keys (the latest of
    equals: it sees the most keys); the last row when none is compared."""
    rows = merge.rows.nonzero().flatten().tolist()
    if not rows:
        return int(merge.rows.numel()) - 1
    return max(rows, key=lambda r: (merge.distinct(r, merged=False), r))


def kv_choices(n_head: int) -> list[int]:
    """The KV head counts a layer of ``n_head`` query heads can have: its divisors (1: MQA, n_head: MHA)."""
    return merge_choices(n_head)


def max_score_block(steps: list) -> int:
    """The tiling example's key block that holds the row's largest score: after it the running max m stops
    changing, and every later block only adds to the normaliser l. ``steps``: the example's TilingStep list."""
    best = max(range(len(steps)), key=lambda i: float(steps[i].scores.max()))
    return best


__all__ = [
    "HeadMerge",
    "head_merges",
    "kv_choices",
    "max_score_block",
    "merge_choices",
    "merge_heads",
    "merged_scores",
    "most_varied_layer",
    "most_varied_row",
]

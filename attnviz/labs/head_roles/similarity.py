"""How alike heads are: the Jensen–Shannon distance between every pair of heads' patterns, average-linkage
clustering, and the groups of heads closer than a threshold (the tutorial's "too many heads" pitfall, measured).

The rows compared and their divergences are computed on the model's device when given one (a record keeps q and k
on the host: each picked row's window goes there); only the (N, N) distances come back. The clustering is host work
on N² numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from attnviz.core.capture import weights_window
from attnviz.core.head_stats import entropy
from attnviz.i18n.message import Message, msg
from attnviz.models.record import AttentionRecord

SIMILARITY_TOKENS = 512  # heads are compared on at most the first this many tokens
SIMILARITY_MAX_CELLS = 2**29  # pairs x rows x keys of Jensen–Shannon work per record (about 2 s on 2 cores)
SIMILARITY_MIN_ROWS = 8
SIMILARITY_BLOCK = 2**24  # elements of (heads, rows, keys) held at once
REDUNDANT_DISTANCE = 0.2  # heads closer than this (JS distance, 0..1) form a redundant group


@dataclass(frozen=True)
class HeadSimilarity:
    """Every pair of heads compared, clustered.

    distance: (N, N) JS distances, N = n_layer · n_head, head n = layer · n_head + head;
    merges: (N - 1, 4) average-linkage merges (cluster a, cluster b, distance, size),
    numbered as scipy's ``linkage`` does; order: the leaves in dendrogram order;
    note: which tokens and rows were compared, in words.
    """

    distance: np.ndarray
    merges: np.ndarray
    order: list[int]
    n_head: int
    note: Message

    @property
    def nbytes(self) -> int:
        return self.distance.nbytes + self.merges.nbytes

    def label(self, index: int) -> str:
        return f"L{index // self.n_head} H{index % self.n_head}"

    def groups(self, threshold: float = REDUNDANT_DISTANCE) -> list[list[int]]:
        """Redundant groups: clusters of two or more heads merged at a distance ≤ ``threshold``, in dendrogram order."""
        return redundant_groups(self.merges, len(self.distance), threshold, self.order)


def js_distance_matrix(patterns: Tensor) -> Tensor:
    """Jensen–Shannon distance between every pair of heads: (N, R, K) rows -> (N, N), in [0, 1].

    Per query row, JSD(P, Q) = H((P + Q) / 2) - (H(P) + H(Q)) / 2 in bits; the
    distance is the square root of its mean over the R rows (0 for identical
    heads, 1 for heads that never share a key). Pairs are done a block at a time.
    """
    n, r, k = patterns.shape
    patterns = patterns.float()
    own = entropy(patterns)  # (N, R)
    divergence = torch.zeros(n, n, device=patterns.device)
    step = max(1, SIMILARITY_BLOCK // max(1, r * k))
    for a in range(n - 1):
        for b0 in range(a + 1, n, step):
            b1 = min(n, b0 + step)
            mixed = entropy((patterns[a : a + 1] + patterns[b0:b1]) / 2)  # (b1 - b0, R)
            jsd = (mixed - (own[a : a + 1] + own[b0:b1]) / 2).mean(dim=-1) / math.log(2)  # (b1 - b0,)
            divergence[a, b0:b1] = jsd
    divergence = (divergence + divergence.T).clamp(0.0, 1.0)
    return divergence.sqrt()


def average_linkage(distance: np.ndarray) -> np.ndarray:
    """Average-linkage agglomerative clustering of an (N, N) distance matrix -> (N - 1, 4) merges.

    Rows are (cluster a, cluster b, distance, size) with leaves 0..N-1 and the
    cluster made at merge m numbered N + m, as scipy's ``linkage``. Merge
    distances never decrease (average linkage has no inversions).
    """
    n = len(distance)
    d = np.array(distance, dtype=np.float64)
    np.fill_diagonal(d, np.inf)
    ids, sizes = list(range(n)), np.ones(n)
    merges = np.zeros((max(0, n - 1), 4))
    for m in range(n - 1):
        i, j = np.unravel_index(np.argmin(d), d.shape)
        i, j = min(i, j), max(i, j)
        merges[m] = (min(ids[i], ids[j]), max(ids[i], ids[j]), d[i, j], sizes[i] + sizes[j])
        merged = (sizes[i] * d[i] + sizes[j] * d[j]) / (sizes[i] + sizes[j])  # Lance–Williams, average linkage
        d[i], d[:, i] = merged, merged
        d[i, i] = np.inf
        d[j], d[:, j] = np.inf, np.inf
        sizes[i], ids[i] = sizes[i] + sizes[j], n + m
    return merges


def leaf_order(merges: np.ndarray, n: int) -> list[int]:
    """The leaves in dendrogram order, so that every cluster is a contiguous run."""
    if n == 0:
        return []
    children = {n + m: (int(a), int(b)) for m, (a, b, _, _) in enumerate(merges)}
    order, stack = [], [n + len(merges) - 1 if len(merges) else 0]
    while stack:
        node = stack.pop()
        if node < n:
            order.append(node)
        else:
            a, b = children[node]
            stack += [b, a]
    return order


def redundant_groups(merges: np.ndarray, n: int, threshold: float, order: list[int] | None = None) -> list[list[int]]:
    """Clusters of at least two leaves joined at distance ≤ ``threshold``, each in ``order`` (default: ascending)."""
    members = {i: [i] for i in range(n)}
    for m, (a, b, dist, _) in enumerate(merges):
        if dist > threshold:
            break
        members[n + m] = members.pop(int(a)) + members.pop(int(b))
    rank = {leaf: i for i, leaf in enumerate(order or range(n))}
    groups = [sorted(g, key=rank.__getitem__) for g in members.values() if len(g) >= 2]
    return sorted(groups, key=lambda g: rank[g[0]])


def similarity_rows(record: AttentionRecord, device: torch.device | str | None = None) -> tuple[Tensor, Message]:
    """The rows heads are compared on: (N, R, K) weights on ``device`` (the CPU when None), and a note saying which.

    The first min(q_len, SIMILARITY_TOKENS) tokens; of their rows that see at
    least two keys in every layer, R evenly spaced so that pairs x R x K stays
    within SIMILARITY_MAX_CELLS. Rows cut at K keys (a bidirectional model read
    past them) are renormalised. ValueError when no row sees two keys.
    """
    tokens = min(record.q_len, record.k_len, SIMILARITY_TOKENS)
    n = record.n_layer * record.n_head
    live = record.live_rows()[:, :tokens].all(dim=0).nonzero()[:, 0]  # (n_live,)
    if len(live) == 0:
        raise ValueError(msg("head_roles_lib.no_row_two_keys", q_len=record.q_len))
    pairs = max(1, n * (n - 1) // 2)
    n_rows = max(SIMILARITY_MIN_ROWS, SIMILARITY_MAX_CELLS // (pairs * tokens))
    picked = live if len(live) <= n_rows else live[torch.linspace(0, len(live) - 1, n_rows).round().long()]
    patterns = []
    for capture in record.layers:  # record.weights(layer, None, ...), each window computed on the device
        w = torch.cat(
            [weights_window(capture, None, (int(i), int(i) + 1), (0, tokens), device=device) for i in picked], 1
        )
        patterns.append(w)  # (n_head, R, K)
    rows = torch.cat(patterns)  # (N, R, K)
    total = rows.sum(dim=-1, keepdim=True)
    rows = rows / total.clamp_min(1e-12)
    spaced = msg("head_roles_lib.note_spaced", live=len(live)) if len(picked) < len(live) else ""
    over = (
        msg("head_roles_lib.note_first", tokens=tokens)
        if tokens < record.q_len
        else msg("head_roles_lib.note_all", tokens=tokens)
    )
    cut = msg("head_roles_lib.note_cut") if tokens < record.k_len and not record.causal else ""
    return rows, msg("head_roles_lib.note", rows=len(picked), spaced=spaced, over=over, cut=cut)


def head_similarity(record: AttentionRecord, device: torch.device | str | None = None) -> HeadSimilarity:
    """Every pair of the record's heads compared by JS distance on ``device`` (the model's; the CPU when None),
    clustered by average linkage on the host."""
    rows, note = similarity_rows(record, device)
    distance = js_distance_matrix(rows).cpu().numpy()
    merges = average_linkage(distance)
    return HeadSimilarity(distance, merges, leaf_order(merges, len(distance)), record.n_head, note)

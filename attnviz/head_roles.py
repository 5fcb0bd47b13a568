"""What each head does, measured: its role, how alike heads are, and whether either holds across prompts.

Three questions people ask about a model's heads, answered from an
:class:`~attnviz.record.AttentionRecord` (no Streamlit, no I/O):

- **Roles.** Every head is labelled sink, previous-token, self, local, uniform or
  content from its row-averaged statistics, with the statistic that decided it
  as its score, and the entropy left once the first token is taken out.
  There is no "dead" role: a dead head is one whose *output* barely moves the
  residual stream, and a record holds attention weights, q and k, not values or
  the output projection. Attention alone cannot tell a no-op head from a sink
  head that reads a useful first token.
- **Similarity.** The Jensen–Shannon distance between every pair of heads'
  patterns, average-linkage clustering, and the groups of heads closer than a
  threshold: the tutorial's "too many heads" pitfall, measured.
- **Stability and the sink against length.** Roles over several prompts, and
  each head's weight on the first token as the input grows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from attnviz.capture import WINDOW_CELLS
from attnviz.head_stats import PREVIOUS_TOKEN, SINK_FIRST_TOKEN, UNIFORM_ENTROPY_NORM, entropy
from attnviz.record import AttentionRecord
from attnviz.source import AttentionSource

ROLES = ("sink", "previous-token", "self", "local", "uniform", "content", "undetermined")
SELF_TOKEN = 0.5  # a self head puts at least this much weight on its own position
LOCAL_WINDOW = 3  # a local head's keys lie within this many positions of the query, either side
LOCAL_WEIGHT = 0.5  # ... and carry at least this much of its weight
ROW_CHUNK = 256  # query rows per weights_window call when measuring local weight

SIMILARITY_TOKENS = 512  # heads are compared on at most the first this many tokens
SIMILARITY_MAX_CELLS = 2**29  # pairs x rows x keys of Jensen–Shannon work per record (about 2 s on 2 cores)
SIMILARITY_MIN_ROWS = 8
SIMILARITY_BLOCK = 2**24  # elements of (heads, rows, keys) held at once
REDUNDANT_DISTANCE = 0.2  # heads closer than this (JS distance, 0..1) form a redundant group

SINK_LENGTHS = (64, 256, 512)  # the default lengths of sink_vs_length: seconds on every bundled model


def describe_roles() -> str:
    """The role rules in words, with the thresholds this module applies."""
    return (
        f"sink (≥ {SINK_FIRST_TOKEN:g} on the first token), previous-token (≥ {PREVIOUS_TOKEN:g} on the previous "
        f"token), self (≥ {SELF_TOKEN:g} on itself): the strongest of these three wins; else uniform (entropy_norm ≥ "
        f"{UNIFORM_ENTROPY_NORM:g}); else local (≥ {LOCAL_WEIGHT:g} within ±{LOCAL_WINDOW} tokens); else content. "
        "Undetermined: no row sees two keys."
    )


def entropy_without_first(row_entropy: Tensor, first_weight: Tensor) -> Tensor:
    """Entropy (nats) of each row once the first key is removed and the rest renormalised: (...) -> (...).

    From the row's entropy H and first-key weight w0 alone, since
    H' = (H + w0·log w0) / (1 - w0) + log(1 - w0). NaN where the rest weighs under 1e-6.
    """
    rest = 1.0 - first_weight
    safe = rest.clamp_min(1e-6)
    value = (row_entropy + torch.special.xlogy(first_weight, first_weight)) / safe + safe.log()
    return torch.where(rest > 1e-6, value.clamp_min(0.0), torch.nan)


def local_weight(record: AttentionRecord, window: int = LOCAL_WINDOW) -> Tensor:
    """Each row's weight on keys within ``window`` positions of the query: (n_layer, n_head, q_len).

    Recomputed from the kept q and k in chunks of rows, each reading only the
    band around its diagonal. NaN everywhere when the record kept no q and k.
    """
    out = torch.full((record.n_layer, record.n_head, record.q_len), math.nan)
    if record.layers[0].q is None:
        return out
    offset = record.k_len - record.q_len  # query i sits at position offset + i
    chunk = max(1, min(ROW_CHUNK, WINDOW_CELLS // (ROW_CHUNK + 2 * window + 1)))
    for r0 in range(0, record.q_len, chunk):
        r1 = min(record.q_len, r0 + chunk)
        c0, c1 = max(0, r0 + offset - window), min(record.k_len, r1 + offset + window)
        q_pos = torch.arange(r0, r1) + offset  # (C,)
        k_pos = torch.arange(c0, c1)  # (W,)
        near = ((q_pos[:, None] - k_pos[None, :]).abs() <= window).float()  # (C, W)
        for layer in range(record.n_layer):
            weights = record.weights(layer, None, (r0, r1), (c0, c1))  # (n_head, C, W)
            out[layer, :, r0:r1] = (weights * near).sum(dim=-1)
    return out


def _row_means(record: AttentionRecord) -> dict[str, Tensor]:
    """The role statistics of every head, averaged over live rows: {name: (n_layer, n_head)}."""
    live = record.live_rows()[:, None, :]  # (n_layer, 1, q_len)
    first = record.row_stat("first_token_weight")
    rows = {
        "first_token_weight": first,
        "prev_token_weight": record.row_stat("prev_token_weight"),
        "self_weight": record.row_stat("self_weight"),
        "local_weight": local_weight(record),
        "entropy_without_sink": entropy_without_first(record.row_stat("entropy"), first.nan_to_num(0.0)),
    }
    means = {name: torch.nanmean(value.masked_fill(~live, math.nan), dim=-1) for name, value in rows.items()}
    stats = record.statistics
    means["entropy_norm"] = torch.tensor(stats["entropy_norm"].to_numpy()).view(record.n_layer, record.n_head)
    means["max_weight"] = torch.tensor(stats["max_weight"].to_numpy()).view(record.n_layer, record.n_head)
    return means


def assign_role(stats: dict[str, float]) -> tuple[str, float]:
    """One head's role and the score that decided it, from its averaged statistics (see :func:`describe_roles`)."""

    def value(name: str) -> float:
        v = stats.get(name)
        return math.nan if v is None else float(v)

    if math.isnan(value("entropy_norm")):
        return "undetermined", math.nan
    single = [
        ("sink", value("first_token_weight"), SINK_FIRST_TOKEN),
        ("previous-token", value("prev_token_weight"), PREVIOUS_TOKEN),
        ("self", value("self_weight"), SELF_TOKEN),
    ]
    passed = [(score, role) for role, score, line in single if not math.isnan(score) and score >= line]
    if passed:
        score, role = max(passed)
        return role, score
    if value("entropy_norm") >= UNIFORM_ENTROPY_NORM:
        return "uniform", value("entropy_norm")
    if not math.isnan(value("local_weight")) and value("local_weight") >= LOCAL_WEIGHT:
        return "local", value("local_weight")
    return "content", value("max_weight")  # how sharply it picks keys by what they are, not where


def head_roles(record: AttentionRecord) -> pd.DataFrame:
    """One row per head: layer, head, role, score, entropy_without_sink and the statistics behind the role.

    score is the statistic that decided the role (the first-token weight of a
    sink, the entropy_norm of a uniform head, the max weight of a content head).
    entropy_without_sink is the row entropy in nats after the first token is
    removed and the rest renormalised, averaged over rows: how much choice is
    left once the sink is set aside.
    """
    means = _row_means(record)
    columns = (
        "entropy_without_sink",
        "first_token_weight",
        "prev_token_weight",
        "self_weight",
        "local_weight",
        "entropy_norm",
        "max_weight",
    )
    rows = []
    for layer in range(record.n_layer):
        for head in range(record.n_head):
            stats = {name: float(means[name][layer, head]) for name in columns}
            role, score = assign_role(stats)
            rows.append({"layer": layer, "head": head, "role": role, "score": score, **stats})
    return pd.DataFrame(rows, columns=["layer", "head", "role", "score", *columns])


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
    note: str

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
    divergence = torch.zeros(n, n)
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


def similarity_rows(record: AttentionRecord) -> tuple[Tensor, str]:
    """The rows heads are compared on: (N, R, K) weights, and a note saying which.

    The first min(q_len, SIMILARITY_TOKENS) tokens; of their rows that see at
    least two keys in every layer, R evenly spaced so that pairs x R x K stays
    within SIMILARITY_MAX_CELLS. Rows cut at K keys (a bidirectional model read
    past them) are renormalised. ValueError when no row sees two keys.
    """
    tokens = min(record.q_len, record.k_len, SIMILARITY_TOKENS)
    n = record.n_layer * record.n_head
    live = record.live_rows()[:, :tokens].all(dim=0).nonzero()[:, 0]  # (n_live,)
    if len(live) == 0:
        raise ValueError(f"no query row of these {record.q_len} tokens sees two keys: heads cannot be compared")
    pairs = max(1, n * (n - 1) // 2)
    n_rows = max(SIMILARITY_MIN_ROWS, SIMILARITY_MAX_CELLS // (pairs * tokens))
    picked = live if len(live) <= n_rows else live[torch.linspace(0, len(live) - 1, n_rows).round().long()]
    patterns = []
    for layer in range(record.n_layer):
        w = torch.cat([record.weights(layer, None, (int(i), int(i) + 1), (0, tokens)) for i in picked], dim=1)
        patterns.append(w)  # (n_head, R, K)
    rows = torch.cat(patterns)  # (N, R, K)
    total = rows.sum(dim=-1, keepdim=True)
    rows = rows / total.clamp_min(1e-12)
    note = f"Compared on {len(picked):,} query rows"
    note += f" (evenly spaced, of {len(live):,})" if len(picked) < len(live) else ""
    note += f" over the first {tokens:,} tokens" if tokens < record.q_len else f" over all {tokens:,} tokens"
    if tokens < record.k_len and not record.causal:
        note += ", each row cut to those keys and renormalised"
    return rows, note + "."


def head_similarity(record: AttentionRecord) -> HeadSimilarity:
    """Every pair of the record's heads compared by JS distance, clustered by average linkage."""
    rows, note = similarity_rows(record)
    distance = js_distance_matrix(rows).numpy()
    merges = average_linkage(distance)
    return HeadSimilarity(distance, merges, leaf_order(merges, len(distance)), record.n_head, note)


def role_stability(source: AttentionSource, texts: list[str], max_tokens: int) -> pd.DataFrame:
    """Each head's most common role over ``texts``: layer, head, role, share (of prompts), n_prompts.

    Texts with fewer than two tokens are skipped; ValueError when none is left.
    Ties go to the role listed first in :data:`ROLES`.
    """
    frames = []
    for text in texts:
        record = source.run(text, max_tokens)
        if len(record.tokens) >= 2:
            frames.append(head_roles(record)[["layer", "head", "role"]])
    if not frames:
        raise ValueError(f"none of the {len(texts)} texts has two tokens to compare heads on")
    counts = pd.concat(frames).groupby(["layer", "head"])["role"].value_counts().rename("count").reset_index()
    counts["rank"] = counts["role"].map(ROLES.index)
    top = counts.sort_values(["layer", "head", "count", "rank"], ascending=[True, True, False, True])
    top = top.groupby(["layer", "head"]).head(1).reset_index(drop=True)
    return pd.DataFrame(
        {
            "layer": top["layer"],
            "head": top["head"],
            "role": top["role"],
            "share": top["count"] / len(frames),
            "n_prompts": len(frames),
        }
    )


def text_of_length(source: AttentionSource, text: str, n_tokens: int) -> str:
    """``text`` repeated until the source reads at least ``n_tokens`` tokens from it (ValueError when it is empty)."""
    if not source.encode(text, 1).tokens:
        raise ValueError("the text has no tokens to repeat")
    repeated = text
    while source.encode(repeated, n_tokens).n_input < n_tokens:
        repeated = f"{repeated} {repeated}"
    return repeated


def sink_vs_length(source: AttentionSource, text: str, lengths: tuple[int, ...] = SINK_LENGTHS) -> pd.DataFrame:
    """Each head's weight on the first token as the input grows: length, layer, head, first_token_weight.

    ``text`` is repeated to each length (capped at the model's ``max_positions``);
    first_token_weight is the mean over query rows that see two keys. The
    captures keep no q and k, so each holds only row statistics and pooled maps.
    """
    frames = []
    for length in sorted({min(int(n), source.max_positions) for n in lengths}):
        record = source.run(text_of_length(source, text, length), length, keep_qk=False)
        stats = record.statistics[["layer", "head", "first_token_weight"]].copy()
        stats.insert(0, "length", len(record.tokens))
        frames.append(stats)
    frame = pd.concat(frames, ignore_index=True)
    return frame.drop_duplicates(["length", "layer", "head"]).reset_index(drop=True)

"""What each head does, measured: its role, how alike heads are, and whether either holds across prompts.

Three questions people ask about a model's heads, answered from an
:class:`~attnviz.models.record.AttentionRecord` (no Streamlit, no I/O):

- **Roles.** Every head is labelled sink, previous-token, self, local, uniform,
  dead or content, with the statistic that decided it as its score, and the
  entropy left once the first token is taken out. All but "dead" come from the
  record's row-averaged attention statistics. "Dead" is about a head's
  *output*: attention alone cannot tell a no-op head from a sink head that reads
  a useful first token, so it needs each head's weighted sum of V through its
  slice of W_O, which :func:`head_output_norms` gets by rerunning every layer
  with our own module (:meth:`AttentionSource.attention_layer`) on a short
  prefix of the text.
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

from attnviz.core.attention import scaled_dot_product_attention
from attnviz.core.capture import WINDOW_CELLS
from attnviz.core.head_stats import PREVIOUS_TOKEN, SINK_FIRST_TOKEN, UNIFORM_ENTROPY_NORM, entropy
from attnviz.core.progress import Progress, or_none
from attnviz.i18n.message import Message, msg
from attnviz.models.record import AttentionRecord
from attnviz.models.source import AttentionSource, LayerInput

ROLES = ("sink", "previous-token", "self", "local", "uniform", "dead", "content", "undetermined")
SELF_TOKEN = 0.5  # a self head puts at least this much weight on its own position
LOCAL_WINDOW = 3  # a local head's keys lie within this many positions of the query, either side
LOCAL_WEIGHT = 0.5  # ... and carry at least this much of its weight
ROW_CHUNK = 256  # query rows per weights_window call when measuring local weight

SIMILARITY_TOKENS = 512  # heads are compared on at most the first this many tokens
SIMILARITY_MAX_CELLS = 2**29  # pairs x rows x keys of Jensen–Shannon work per record (about 2 s on 2 cores)
SIMILARITY_MIN_ROWS = 8
SIMILARITY_BLOCK = 2**24  # elements of (heads, rows, keys) held at once
REDUNDANT_DISTANCE = 0.2  # heads closer than this (JS distance, 0..1) form a redundant group

# "dead": a head whose output (its weighted sum of V through its slice of W_O) has a mean norm under this share of
# the median head of its layer. Measured on at most OUTPUT_TOKENS tokens, every layer's input from one pass of the
# model, each layer rerun once by our own module
DEAD_OUTPUT_SHARE = 0.1
OUTPUT_TOKENS = 128
# what finding dead heads costs: one pass plus one rerun of every layer, about 12·d_model² multiply-adds a token a
# layer each. SmolLM2 (30 layers, d_model 576) at 128 tokens: 1.5e10, measured at 0.45 s by benchmarks/head_roles.py
# on a 2-core CPU. Under OUTPUT_AUTO_MACS (every bundled model; the embedded model up to 12 layers of d_model 1,024)
# the page measures outputs on every run, and the dead role counts across prompts too; over it the user asks for
# it, told how long it takes
OUTPUT_AUTO_MACS = 2 * 10**11
OUTPUT_SECONDS_PER_MAC = 0.45 / (2 * 30 * 128 * 12 * 576**2)

# "Across prompts": the user's own prompts, one per line, at most this many, each cut to at most STABILITY_TOKENS
# tokens (and the sidebar's max tokens), so one request is at most 8 captures of 512 tokens
STABILITY_MAX_PROMPTS = 8
STABILITY_TOKENS = 512
STABILITY_PROMPT_CHARS = 20_000  # characters read from the text area before it is split into prompts

SINK_LENGTHS = (64, 256, 512)  # the default lengths of sink_vs_length: seconds on every bundled model
SINK_CHOICES = (64, 128, 256, 512, 1024, 2048, 4096, 8192)  # the lengths the page offers (up to max_positions)
# sink_vs_length's time is dominated by the capture's n_layer x n_head x T² attention cells: SmolLM2-135M
# (30 x 9 heads) at 8,192 tokens: 47.5 s and 1,911 MB above the loaded model on an idle 2-core CPU
# (benchmarks/head_roles.py), about SINK_SECONDS_PER_CELL s a cell, plus about a second a length
SINK_8192_SECONDS = 48.0
SINK_SECONDS_PER_CELL = SINK_8192_SECONDS / (30 * 9 * 8192**2)
SINK_SECONDS_PER_LENGTH = 1.0
SINK_8192_MB = 1911
SINK_CONFIRM_SECONDS = 20.0  # a selection estimated slower than this runs only once the user confirms it
# one request's bound: every length the page offers on SmolLM2 (64 to 8,192 tokens), about 1.33 captures at 8,192.
# Peak memory is that of the longest capture alone (one capture at a time, each reduced to row statistics)
SINK_MAX_CELLS = 30 * 9 * sum(n * n for n in SINK_CHOICES)


def describe_roles() -> Message:
    """The role rules in words, with the thresholds this module applies."""
    return msg(
        "head_roles_lib.describe",
        sink=SINK_FIRST_TOKEN,
        previous=PREVIOUS_TOKEN,
        self_token=SELF_TOKEN,
        uniform=UNIFORM_ENTROPY_NORM,
        local=LOCAL_WEIGHT,
        window=LOCAL_WINDOW,
        dead=DEAD_OUTPUT_SHARE,
        tokens=OUTPUT_TOKENS,
    )


def role_name(role: str) -> Message:
    """A role's name, to show (the data keeps the English one: "previous-token" …)."""
    return msg(f"head_roles_lib.role_{role.replace('-', '_')}")


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

    if not math.isnan(value("output_share")) and value("output_share") < DEAD_OUTPUT_SHARE:
        return "dead", value("output_share")
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


def per_head_output(out: Tensor, w_o: Tensor) -> Tensor:
    """Each head's part of the layer output: out (B, n_head, T, head_dim), W_O's weight (d_model, n_head · head_dim)
    -> (B, n_head, T, d_model).

    Head h's columns of W_O are h · head_dim to (h + 1) · head_dim, as :func:`~attnviz.core.attention.merge_heads` lays
    the heads side by side, so the sum over heads (plus W_O's bias, which no head owns) is the layer's output.
    """
    n_head, head_dim = out.shape[1], out.shape[-1]
    w = w_o.view(w_o.shape[0], n_head, head_dim)  # (d_model, n_head, head_dim)
    return torch.einsum("bhtd,mhd->bhtm", out, w)  # (B, n_head, T, d_model)


@torch.no_grad()
def layer_output_norms(layer: LayerInput) -> Tensor:
    """Each head's output norm after W_O, averaged over the query rows that see a key: (n_head,).

    Reruns ``layer`` as :meth:`MultiHeadAttention.forward` does (project, RoPE, attention under the layer's mask
    and scale), but keeps the heads apart before W_O mixes them.
    """
    mha, x = layer.attention, layer.hidden  # x: (1, T, d_model)
    positions = torch.arange(x.shape[1], device=x.device)
    q, k, v = mha.project_qkv(x, x, x, layer.rotate, positions)  # (1, n_head, T, hd), (1, n_kv_head, T, hd) x 2
    out, _ = scaled_dot_product_attention(q, k, v, layer.mask, layer.scale)  # (1, n_head, T, head_dim)
    norms = per_head_output(out, mha.w_o.weight).norm(dim=-1)[0].float().cpu()  # (n_head, T)
    live = torch.ones(x.shape[1], dtype=torch.bool) if layer.mask is None else layer.mask.bool().any(-1).cpu()
    return norms[:, live].mean(dim=-1)  # (n_head,)


@dataclass(frozen=True)
class HeadOutputs:
    """How much each head adds to its layer's output.

    norm: (n_layer, n_head) mean over query rows of ‖Σ_j w_ij v_j · W_O[:, head]ᵀ‖, on the first ``n_tokens``
    tokens of the text (``n_input`` before the cut).
    """

    norm: np.ndarray
    n_tokens: int
    n_input: int

    @property
    def nbytes(self) -> int:
        return self.norm.nbytes

    @property
    def share(self) -> np.ndarray:
        """Each head's norm over the median head of its layer: (n_layer, n_head); NaN where the median is 0."""
        median = np.median(self.norm, axis=1, keepdims=True)  # (n_layer, 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(median > 0, self.norm / median, np.nan)

    @property
    def dead(self) -> np.ndarray:
        """(n_layer, n_head) bool: the output averages under DEAD_OUTPUT_SHARE of the layer's median head."""
        share = self.share
        return ~np.isnan(share) & (share < DEAD_OUTPUT_SHARE)


def head_output_norms(
    source: AttentionSource, text: str, max_tokens: int, progress: Progress | None = None
) -> HeadOutputs:
    """Every head's output norm on the first min(max_tokens, OUTPUT_TOKENS) tokens of ``text``.

    Every layer's input from one pass (:meth:`~attnviz.models.source.AttentionSource.attention_layers`). Raises what
    that raises: ParityUnsupportedError when our module cannot rerun this source's layers (then there is no dead
    role). ``progress``: the pass (weighed as n_layer layers), then a step a layer.
    """
    progress = or_none(progress)
    progress.plan([("progress.run", 1, [source.n_layer]), ("progress.layer", source.n_layer)])
    layers = source.attention_layers(text, min(max_tokens, OUTPUT_TOKENS))
    progress.step()
    if layers[0].hidden.shape[1] == 0:
        raise ValueError(msg("head_roles_lib.no_tokens_outputs"))
    progress.stage("progress.layer", len(layers))
    norms = []
    for layer in layers:
        norms.append(layer_output_norms(layer))
        progress.step()
    norms = torch.stack(norms)  # (n_layer, n_head)
    return HeadOutputs(norms.numpy(), len(layers[0].tokens), layers[0].n_input)


def output_cost_macs(source: AttentionSource, max_tokens: int) -> int:
    """About how many multiply-adds :func:`head_output_norms` costs (see OUTPUT_AUTO_MACS)."""
    return 2 * source.n_layer * min(max_tokens, OUTPUT_TOKENS) * 12 * source.d_model**2


def outputs_by_themselves(source: AttentionSource, max_tokens: int) -> bool:
    """Whether finding dead heads is cheap enough to run on every run (OUTPUT_AUTO_MACS), not only when asked."""
    return output_cost_macs(source, max_tokens) <= OUTPUT_AUTO_MACS


def output_seconds(source: AttentionSource, max_tokens: int) -> float:
    """About how long :func:`head_output_norms` takes on a 2-core CPU (calibrated on SmolLM2, see above)."""
    return output_cost_macs(source, max_tokens) * OUTPUT_SECONDS_PER_MAC


def head_roles(record: AttentionRecord, outputs: HeadOutputs | None = None) -> pd.DataFrame:
    """One row per head: layer, head, role, score, entropy_without_sink and the statistics behind the role.

    score is the statistic that decided the role (the first-token weight of a
    sink, the entropy_norm of a uniform head, the max weight of a content head,
    the output share of a dead head). entropy_without_sink is the row entropy in
    nats after the first token is removed and the rest renormalised, averaged
    over rows: how much choice is left once the sink is set aside.
    ``outputs`` (from :func:`head_output_norms`) adds output_norm and
    output_share (the norm over its layer's median head) and the dead role;
    without it they are NaN and no head is dead. attention_role is the role the
    pattern alone gives (what a dead head would be, were it not dead).
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
    if outputs is not None and outputs.norm.shape != (record.n_layer, record.n_head):
        raise ValueError(f"outputs are {outputs.norm.shape}, the record has ({record.n_layer}, {record.n_head}) heads")
    norm = np.full((record.n_layer, record.n_head), np.nan) if outputs is None else outputs.norm
    share = np.full((record.n_layer, record.n_head), np.nan) if outputs is None else outputs.share
    rows = []
    for layer in range(record.n_layer):
        for head in range(record.n_head):
            stats = {name: float(means[name][layer, head]) for name in columns}
            pattern_role, _ = assign_role(stats)
            extra = {"output_norm": float(norm[layer, head]), "output_share": float(share[layer, head])}
            role, score = assign_role({**stats, **extra})
            rows.append(
                {
                    "layer": layer,
                    "head": head,
                    "role": role,
                    "score": score,
                    **stats,
                    **extra,
                    "attention_role": pattern_role,
                }
            )
    return pd.DataFrame(
        rows, columns=["layer", "head", "role", "score", *columns, "output_norm", "output_share", "attention_role"]
    )


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


def similarity_rows(record: AttentionRecord) -> tuple[Tensor, Message]:
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
        raise ValueError(msg("head_roles_lib.no_row_two_keys", q_len=record.q_len))
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
    spaced = msg("head_roles_lib.note_spaced", live=len(live)) if len(picked) < len(live) else ""
    over = (
        msg("head_roles_lib.note_first", tokens=tokens)
        if tokens < record.q_len
        else msg("head_roles_lib.note_all", tokens=tokens)
    )
    cut = msg("head_roles_lib.note_cut") if tokens < record.k_len and not record.causal else ""
    return rows, msg("head_roles_lib.note", rows=len(picked), spaced=spaced, over=over, cut=cut)


def head_similarity(record: AttentionRecord) -> HeadSimilarity:
    """Every pair of the record's heads compared by JS distance, clustered by average linkage."""
    rows, note = similarity_rows(record)
    distance = js_distance_matrix(rows).numpy()
    merges = average_linkage(distance)
    return HeadSimilarity(distance, merges, leaf_order(merges, len(distance)), record.n_head, note)


def parse_prompts(text: str, max_prompts: int = STABILITY_MAX_PROMPTS) -> tuple[list[str], int]:
    """The user's prompts, one per line: (the first ``max_prompts`` non-empty lines, stripped; how many more there were).

    Only the first STABILITY_PROMPT_CHARS characters of ``text`` are read.
    """
    lines = [line.strip() for line in text[:STABILITY_PROMPT_CHARS].splitlines()]
    prompts = [line for line in lines if line]
    return prompts[:max_prompts], max(0, len(prompts) - max_prompts)


def role_stability(
    source: AttentionSource,
    texts: list[str],
    max_tokens: int,
    *,
    with_outputs: bool = False,
    progress: Progress | None = None,
) -> pd.DataFrame:
    """Each head's most common role over ``texts``: layer, head, role, share (of prompts), n_prompts.

    Each text is cut to min(max_tokens, STABILITY_TOKENS) tokens. ``with_outputs``
    measures every head's output on each text too (:func:`head_output_norms`), so
    "dead" counts as a role. Texts with fewer than two tokens are skipped;
    ValueError when none is left. Ties go to the role listed first in :data:`ROLES`. ``progress``: a step a prompt.
    """
    n_tokens = min(max_tokens, STABILITY_TOKENS)
    progress = or_none(progress)
    progress.stage("progress.prompt", len(texts))
    frames = []
    for text in texts:
        record = source.run(text, n_tokens)
        if len(record.tokens) >= 2:
            outputs = head_output_norms(source, text, n_tokens) if with_outputs else None
            frames.append(head_roles(record, outputs)[["layer", "head", "role"]])
        progress.step()
    if not frames:
        raise ValueError(msg("head_roles_lib.no_text_two_tokens", n=len(texts)))
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
        raise ValueError(msg("head_roles_lib.no_tokens_repeat"))
    repeated = text
    while source.encode(repeated, n_tokens).n_input < n_tokens:
        repeated = f"{repeated} {repeated}"
    return repeated


def sink_vs_length(
    source: AttentionSource,
    text: str,
    lengths: tuple[int, ...] = SINK_LENGTHS,
    progress: Progress | None = None,
) -> pd.DataFrame:
    """Each head's weight on the first token as the input grows: length, layer, head, first_token_weight.

    ``text`` is repeated to each length (capped at the model's ``max_positions``);
    first_token_weight is the mean over query rows that see two keys. The
    captures keep no q and k, so each holds only row statistics and pooled maps;
    they run one after another, so the peak memory is the longest one's.
    ValueError over SINK_MAX_CELLS (:func:`check_sink_cost`). ``progress``: a step a length, each weighed by its
    attention cells (n²) so the estimate of the longer ones is calibrated on the shorter ones.
    """
    check_sink_cost(source, lengths)
    capped = sink_lengths(source, lengths)
    progress = or_none(progress)
    progress.stage("progress.length", len(capped), weights=[n * n for n in capped])
    frames = []
    for length in capped:
        record = source.run(text_of_length(source, text, length), length, keep_qk=False)
        stats = record.statistics[["layer", "head", "first_token_weight"]].copy()
        stats.insert(0, "length", len(record.tokens))
        frames.append(stats)
        progress.step()
    frame = pd.concat(frames, ignore_index=True)
    return frame.drop_duplicates(["length", "layer", "head"]).reset_index(drop=True)


def sink_lengths(source: AttentionSource, lengths) -> tuple[int, ...]:
    """The distinct lengths :func:`sink_vs_length` will capture: each capped at the model's max_positions, sorted."""
    return tuple(sorted({min(int(n), source.max_positions) for n in lengths}))


def sink_cells(source: AttentionSource, lengths) -> int:
    """The attention cells (n_layer · n_head · T², summed over lengths) the captures compute: the request's cost."""
    return source.n_layer * source.n_head * sum(n * n for n in sink_lengths(source, lengths))


def sink_seconds(source: AttentionSource, lengths) -> float:
    """About how long :func:`sink_vs_length` takes on a 2-core CPU (see SINK_SECONDS_PER_CELL)."""
    n = len(sink_lengths(source, lengths))
    return sink_cells(source, lengths) * SINK_SECONDS_PER_CELL + n * SINK_SECONDS_PER_LENGTH


def check_sink_cost(source: AttentionSource, lengths) -> None:
    """ValueError, with the numbers, when the lengths ask for more than SINK_MAX_CELLS attention cells."""
    cells = sink_cells(source, lengths)
    if cells > SINK_MAX_CELLS:
        raise ValueError(
            msg(
                "head_roles_lib.sink_too_costly",
                cells=cells,
                n_layer=source.n_layer,
                n_head=source.n_head,
                max_cells=SINK_MAX_CELLS,
            )
        )

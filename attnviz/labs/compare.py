"""Side by side: two records of the same model's heads (two texts, two models with one tokenizer, two masks).

What changes from record A to record B, head by head, without Streamlit or I/O:

- **Statistics.** Each head's row-averaged statistics (:attr:`AttentionRecord.statistics`) in both, and their
  difference b − a, for every statistic both records have.
- **Patterns.** Where the two token sequences agree (:func:`align_tokens`, difflib's matching blocks on the
  tokens' text), the Jensen–Shannon divergence (base 2, in [0, 1]) between a head's attention row in A and in B
  for the same aligned query, both restricted to the aligned keys and renormalised, averaged over the aligned
  queries (:func:`head_jsd`). Rows are read at full resolution from the records on demand, over at most
  :data:`JSD_QUERIES` aligned queries spread evenly along the text, so the cost is bounded at any length.
- **Two models** are compared only when their tokenizers read the text into the same tokens
  (:func:`same_tokens`), and the heads only when both have the same layers x heads; otherwise the comparison says
  why not (:attr:`Comparison.note`) instead of pairing heads that have nothing to do with each other.
- **Two masks** need a source whose mask is a setting with the weights left as they are: the embedded model,
  causal or bidirectional under one seed (:func:`mask_variant`). A model that always runs under its own mask
  cannot be captured under another; :func:`mask_variant` says so by returning None.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from attnviz.core.admission import Need
from attnviz.core.capture import WINDOW_CELLS
from attnviz.core.head_stats import JS_MAX, js_divergence
from attnviz.i18n.message import Message, msg
from attnviz.models.record import AttentionRecord
from attnviz.models.registry import SourceSpec
from attnviz.models.source import Encoding

JSD_QUERIES = 256  # the JSD reads at most this many aligned query rows per head, spread evenly along the text
JSD_CELLS = 2**27  # ... and at most this many weights per record (n_layer x n_head x queries x k_len), so fewer on
MIN_JSD_QUERIES = 16  # large models with long texts, but never fewer than this many queries
CELL_FLOPS = 30  # work per weight read besides q·k (the exp, the renormalisation, the JSD's logarithms)
FLOPS_PER_SECOND = 2e9  # one CPU core, measured loosely on the embedded model at 8,192 tokens
CONFIRM_SECONDS = 5.0  # a comparison predicted to take longer waits for a button
ALIGN_TOKENS = 2048  # difflib aligns at most this many tokens of each text between their common start and end
LARGEST = 10  # changes listed
MIN_MASS = 1e-6  # a row with less weight than this on the aligned keys is not compared: renormalising it would blow up rounding
CHUNK_ELEMENTS = 2**23  # weights held at once per record while the JSD runs: n_head x rows x aligned keys
MODES = ("texts", "models", "masks")


@dataclass(frozen=True)
class Alignment:
    """Positions where the two token sequences agree: ``a[i]`` in A holds the same token as ``b[i]`` in B.

    ``cut``: tokens of the texts' differing middle left unaligned because it was longer than
    :data:`ALIGN_TOKENS` (0: every token was considered).
    """

    a: tuple[int, ...]
    b: tuple[int, ...]
    n_a: int
    n_b: int
    cut: int = 0

    def __len__(self) -> int:
        return len(self.a)


def align_tokens(a: Sequence[str], b: Sequence[str], limit: int = ALIGN_TOKENS) -> Alignment:
    """The tokens the two sequences share, in order: their common start and end, and difflib's matching blocks
    (``autojunk`` off, so a frequent token still aligns) between them, over at most ``limit`` tokens of each
    middle; the rest of a longer middle is left unaligned and counted in :attr:`Alignment.cut`."""
    a, b = list(a), list(b)
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    mid_a, mid_b = a[start : len(a) - end], b[start : len(b) - end]
    cut = max(0, len(mid_a) - limit) + max(0, len(mid_b) - limit)
    pairs = [(i, i) for i in range(start)]
    matcher = difflib.SequenceMatcher(None, mid_a[:limit], mid_b[:limit], autojunk=False)
    for block in matcher.get_matching_blocks():
        pairs += [(start + block.a + k, start + block.b + k) for k in range(block.size)]
    pairs += [(len(a) - end + k, len(b) - end + k) for k in range(end)]
    return Alignment(a=tuple(p for p, _ in pairs), b=tuple(q for _, q in pairs), n_a=len(a), n_b=len(b), cut=cut)


def jensen_shannon(p: Tensor, q: Tensor) -> Tensor:
    """Jensen–Shannon divergence in bits of distributions along the last axis: (..., n) x (..., n) -> (...).

    0 for equal distributions, 1 for disjoint supports; 0·log 0 = 0. Rows must each sum to 1.
    """
    return (js_divergence(p, q) / JS_MAX).clamp(0.0, 1.0).to(p.dtype)  # nats / ln 2 = bits


def jsd_queries(n_layer: int, n_head: int, k_len: int) -> int:
    """How many aligned queries the JSD reads per head: :data:`JSD_QUERIES`, fewer where n_layer x n_head x
    queries x k_len would pass :data:`JSD_CELLS`, never fewer than :data:`MIN_JSD_QUERIES`."""
    fit = JSD_CELLS // max(1, n_layer * n_head * k_len)
    return max(MIN_JSD_QUERIES, min(JSD_QUERIES, fit))


def comparison_seconds(record_a: AttentionRecord, record_b: AttentionRecord) -> float:
    """The predicted time of :func:`compare_records` on one CPU core: every query row read back at full
    resolution in both records (q·k over head_dim, then the exp and the JSD); 0 where the heads differ in shape
    and no row is read."""
    if (record_a.n_layer, record_a.n_head) != (record_b.n_layer, record_b.n_head):
        return 0.0
    queries = jsd_queries(record_a.n_layer, record_a.n_head, max(record_a.k_len, record_b.k_len))
    total = 0.0
    for record in (record_a, record_b):
        capture = record.layers[0]
        head_dim = capture.q.shape[-1] if capture.q is not None else 64
        cells = record.n_layer * record.n_head * min(queries, record.q_len) * record.k_len
        total += cells * (2 * head_dim + CELL_FLOPS)
    return total / FLOPS_PER_SECOND


def comparison_need(record_a: AttentionRecord, record_b: AttentionRecord) -> Need:
    """What :func:`compare_records` holds at its peak: a chunk of rows of both records, renormalised, and the JSD's
    temporaries (about 8 float32 copies of :data:`CHUNK_ELEMENTS`), and its predicted seconds."""
    return Need(8 * CHUNK_ELEMENTS * 4, comparison_seconds(record_a, record_b))


def spread(n: int, k: int) -> list[int]:
    """``min(n, k)`` indices of range(n), evenly spaced, first and last included."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)}) if k > 1 else [n - 1]


def _runs(positions: Sequence[int], longest: int) -> list[tuple[int, int]]:
    """Sorted positions as (start, end) runs of consecutive ones, each at most ``longest`` long."""
    runs: list[tuple[int, int]] = []
    for p in positions:
        if runs and runs[-1][1] == p and p - runs[-1][0] < longest:
            runs[-1] = (runs[-1][0], p + 1)
        else:
            runs.append((p, p + 1))
    return runs


def aligned_rows(record: AttentionRecord, layer: int, queries: Sequence[int], keys: Tensor) -> tuple[Tensor, Tensor]:
    """Every head's full-resolution rows for ``queries``, at the ``keys`` columns: ((n_head, Q, K) weights,
    (Q, K) bool, True where the layer's mask lets the query see the key). Read a run of rows at a time."""
    k_len = record.k_len
    weights, visible = [], []
    for r0, r1 in _runs(queries, max(1, WINDOW_CELLS // k_len)):
        weights.append(record.weights(layer, None, (r0, r1), (0, k_len))[:, :, keys])  # (n_head, R, K)
        visible.append(record.keys(layer).block(r0, r1, 0, k_len)[:, keys])  # (R, K)
    return torch.cat(weights, dim=1).float(), torch.cat(visible, dim=0)


def _restricted(weights: Tensor) -> tuple[Tensor, Tensor]:
    """Rows renormalised over the columns kept: (..., K) -> (distributions (..., K), mass (...))."""
    mass = weights.sum(dim=-1)
    return weights / mass.clamp_min(1e-30)[..., None], mass


def head_jsd(
    record_a: AttentionRecord, record_b: AttentionRecord, alignment: Alignment, max_queries: int = JSD_QUERIES
) -> pd.DataFrame:
    """Per head, the mean JSD (bits) between A's and B's rows for the aligned queries, over the aligned keys.

    One row per head: layer, head, ``jsd`` (NaN where no query could be compared) and ``n_queries`` (how many
    were). At most ``max_queries`` aligned queries are read, evenly spread; a query is compared where it sees at
    least two aligned keys in both records (a row with one key is one-hot whatever the head does) and puts at
    least :data:`MIN_MASS` of its weight on them in both. ValueError when the records' heads differ in shape.
    """
    if (record_a.n_layer, record_a.n_head) != (record_b.n_layer, record_b.n_head):
        raise ValueError(
            msg(
                "compare_lib.shapes_differ",
                a=f"{record_a.n_layer} x {record_a.n_head}",
                b=f"{record_b.n_layer} x {record_b.n_head}",
            )
        )
    n_layer, n_head = record_a.n_layer, record_a.n_head
    picked = spread(len(alignment), max_queries)
    q_a = [alignment.a[i] for i in picked]
    q_b = [alignment.b[i] for i in picked]
    k_a, k_b = torch.tensor(alignment.a, dtype=torch.long), torch.tensor(alignment.b, dtype=torch.long)
    total = torch.zeros(n_layer, n_head, dtype=torch.float64)
    count = torch.zeros(n_layer, n_head, dtype=torch.long)
    if q_a:
        chunk = max(1, CHUNK_ELEMENTS // max(1, n_head * len(k_a)))
        for layer in range(n_layer):
            for c0 in range(0, len(q_a), chunk):
                w_a, v_a = aligned_rows(record_a, layer, q_a[c0 : c0 + chunk], k_a)  # (n_head, Q, K), (Q, K)
                w_b, v_b = aligned_rows(record_b, layer, q_b[c0 : c0 + chunk], k_b)
                p, mass_a = _restricted(w_a)
                q, mass_b = _restricted(w_b)
                live = (v_a.sum(dim=-1) >= 2) & (v_b.sum(dim=-1) >= 2)  # (Q,)
                ok = live & (mass_a >= MIN_MASS) & (mass_b >= MIN_MASS)  # (n_head, Q)
                divergence = jensen_shannon(p, q)  # (n_head, Q)
                total[layer] += torch.where(ok, divergence, 0.0).sum(dim=-1).double()
                count[layer] += ok.sum(dim=-1)
    jsd = torch.where(count > 0, total / count.clamp_min(1), torch.nan)
    return pd.DataFrame(
        {
            "layer": [layer for layer in range(n_layer) for _ in range(n_head)],
            "head": [head for _ in range(n_layer) for head in range(n_head)],
            "jsd": jsd.reshape(-1).numpy(),
            "n_queries": count.reshape(-1).numpy(),
        }
    )


def shared_statistics(record_a: AttentionRecord, record_b: AttentionRecord) -> tuple[str, ...]:
    """The statistics both records have, in A's order (``sink_weight`` only when both models have sinks)."""
    return tuple(c for c in record_a.stat_columns if c in record_b.stat_columns)


def stat_diff(stats_a: pd.DataFrame, stats_b: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Per head, each statistic's b − a: layer, head and ``columns`` (NaN where either is NaN).

    Both tables are one row per head (:attr:`AttentionRecord.statistics`) of the same layers x heads.
    """
    merged = stats_a.merge(stats_b, on=["layer", "head"], suffixes=("_a", "_b"), how="inner", validate="1:1")
    out = merged[["layer", "head"]].copy()
    for column in columns:
        out[column] = merged[f"{column}_b"] - merged[f"{column}_a"]
    return out.reset_index(drop=True)


@dataclass(frozen=True, eq=False)
class Comparison:
    """Record A beside record B.

    diff: per head, each shared statistic's b − a (None when the heads differ in shape); jsd: per head, the
    patterns' JSD over the aligned tokens (None likewise); note: why the heads were not compared, or None.
    """

    a: AttentionRecord
    b: AttentionRecord
    statistics: tuple[str, ...]
    alignment: Alignment
    diff: pd.DataFrame | None
    jsd: pd.DataFrame | None
    note: Message | None = None
    queries: int = 0  # the most aligned queries the JSD read per head

    @property
    def same_shape(self) -> bool:
        return self.diff is not None

    def largest(self, statistic: str | None = None, n: int = LARGEST) -> pd.DataFrame:
        """The ``n`` heads that changed most: by |b − a| of ``statistic``, or by JSD when None.

        Columns: layer, head, ``jsd``, and for a statistic its ``a``, ``b`` and ``diff``. Empty when the heads
        were not compared.
        """
        if self.diff is None or self.jsd is None:
            return pd.DataFrame(columns=["layer", "head", "jsd"])
        table = self.jsd[["layer", "head", "jsd"]].copy()
        if statistic is None:
            order = table["jsd"].fillna(-1.0)
        else:
            if statistic not in self.statistics:
                raise ValueError(msg("compare_lib.unknown_statistic", name=statistic, known=", ".join(self.statistics)))
            table["a"] = self.a.statistics[statistic].to_numpy()
            table["b"] = self.b.statistics[statistic].to_numpy()
            table["diff"] = self.diff[statistic].to_numpy()
            order = table["diff"].abs().fillna(-1.0)
        picked = np.argsort(-order.to_numpy(), kind="stable")[:n]
        return table.iloc[picked].reset_index(drop=True)


def compare_records(record_a: AttentionRecord, record_b: AttentionRecord, max_queries: int | None = None) -> Comparison:
    """Statistics, their difference and the patterns' JSD of two records (see the module docstring).

    ``max_queries``: aligned queries read per head (None: :func:`jsd_queries`). ValueError when either record has
    no token.
    """
    if not record_a.tokens or not record_b.tokens:
        raise ValueError(msg("compare_lib.no_tokens"))
    alignment = align_tokens([t.text for t in record_a.tokens], [t.text for t in record_b.tokens])
    columns = shared_statistics(record_a, record_b)
    if (record_a.n_layer, record_a.n_head) != (record_b.n_layer, record_b.n_head):
        note = msg(
            "compare_lib.shapes_differ",
            a=f"{record_a.n_layer} x {record_a.n_head}",
            b=f"{record_b.n_layer} x {record_b.n_head}",
        )
        return Comparison(record_a, record_b, columns, alignment, None, None, note)
    diff = stat_diff(record_a.statistics, record_b.statistics, columns)
    if max_queries is None:
        max_queries = jsd_queries(record_a.n_layer, record_a.n_head, max(record_a.k_len, record_b.k_len))
    jsd = head_jsd(record_a, record_b, alignment, max_queries)
    return Comparison(record_a, record_b, columns, alignment, diff, jsd, queries=min(max_queries, len(alignment)))


def same_tokens(a: Encoding, b: Encoding) -> bool:
    """Whether two sources read a text into the same tokens: the same ids where both have a vocabulary, none where
    only one has; and the same tokens, each its display text, the model's own string and whether it is special
    (SmolLM2's "Ġcat" is not the embedded model's "cat", though both show "cat")."""
    if (a.ids is None) != (b.ids is None) or (a.ids is not None and list(a.ids) != list(b.ids)):
        return False
    return [(t.text, t.raw, t.special) for t in a.tokens] == [(t.text, t.raw, t.special) for t in b.tokens]


def tokens_differ(name_a: str, name_b: str, a: Encoding, b: Encoding) -> Message:
    """Why two models cannot be compared on a text: where their tokens first part, each as the model reads it
    (its own string where it has one)."""
    texts_a, texts_b = [t.raw or t.text for t in a.tokens], [t.raw or t.text for t in b.tokens]
    pairs = zip(a.tokens, b.tokens, strict=False)
    at = next(
        (i for i, (x, y) in enumerate(pairs) if (x.text, x.raw, x.special) != (y.text, y.raw, y.special)),
        min(len(a.tokens), len(b.tokens)),
    )
    return msg(
        "compare_lib.tokens_differ",
        a=name_a,
        b=name_b,
        n_a=len(texts_a),
        n_b=len(texts_b),
        at=at,
        token_a=texts_a[at] if at < len(texts_a) else "",
        token_b=texts_b[at] if at < len(texts_b) else "",
    )


def mask_variant(spec: SourceSpec, causal: bool) -> SourceSpec | None:
    """``spec`` with the same weights under the causal (``causal``) or bidirectional mask, where the mask is a
    setting of the model (the embedded model's, under one seed); None where the source only runs under its own
    mask, which no capture can change."""
    if spec.config is None:
        return None
    return replace(spec, config=replace(spec.config, causal=causal))


def mask_name(causal: bool) -> str:
    return "causal" if causal else "bidirectional"


__all__ = [
    "ALIGN_TOKENS",
    "CONFIRM_SECONDS",
    "JSD_CELLS",
    "JSD_QUERIES",
    "LARGEST",
    "MODES",
    "Alignment",
    "Comparison",
    "align_tokens",
    "aligned_rows",
    "compare_records",
    "comparison_need",
    "comparison_seconds",
    "head_jsd",
    "jensen_shannon",
    "jsd_queries",
    "mask_name",
    "mask_variant",
    "same_tokens",
    "shared_statistics",
    "spread",
    "stat_diff",
    "tokens_differ",
]

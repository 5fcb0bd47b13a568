"""Record A beside record B: each head's statistics and their difference b − a, and how far its pattern moved.

The patterns are compared where the two token sequences agree (:func:`align_tokens`), by the Jensen–Shannon
divergence of each aligned query's row (:func:`head_jsd`) over a bounded sample of queries (:func:`jsd_rows`),
timed on this machine before it runs (:func:`measured_seconds`); :func:`compare_records` puts it together as a
:class:`Comparison` (see :mod:`attnviz.labs.compare`).
"""

from __future__ import annotations

import difflib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from attnviz.core.admission import Need
from attnviz.core.capture import WINDOW_CELLS
from attnviz.core.head_stats import JS_MAX, js_divergence
from attnviz.core.progress import Progress, or_none
from attnviz.i18n.message import Message, msg
from attnviz.models.record import AttentionRecord

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
QUERY_RUN = 32  # the JSD reads its aligned queries in runs of up to this many consecutive ones ...
QUERY_RUNS = 8  # ... and in at least this many runs where it reads that many queries, spread along the text
FLOAT_FLOOR = 1e-6  # a JSD or a difference smaller than this is float32 rounding: shown as 0
MEASURE_SECONDS = 0.25  # measured_seconds times layers until this long has been spent


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
        cells = record.n_layer * record.n_head * min(queries, record.q_len) * record.k_len
        total += cells * cell_flops(record)
    return total / FLOPS_PER_SECOND


def cell_flops(record: AttentionRecord) -> int:
    """The work of reading back one weight of ``record`` at full resolution: its q·k over head_dim (64 where the
    record keeps no q), then :data:`CELL_FLOPS` (the exp, the renormalisation, what the reader does with it)."""
    capture = record.layers[0]
    head_dim = capture.q.shape[-1] if capture.q is not None else 64
    return 2 * head_dim + CELL_FLOPS


def comparison_need(record_a: AttentionRecord, record_b: AttentionRecord) -> Need:
    """What :func:`compare_records` holds at its peak: a chunk of rows of both records, renormalised, and the JSD's
    temporaries (about 8 float32 copies of :data:`CHUNK_ELEMENTS`), and its predicted seconds."""
    return Need(8 * CHUNK_ELEMENTS * 4, comparison_seconds(record_a, record_b))


def spread(n: int, k: int) -> list[int]:
    """``min(n, k)`` indices of range(n), evenly spaced, first and last included."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)}) if k > 1 else [n - 1]


def jsd_rows(n: int, k: int) -> list[int]:
    """The indices of range(n) the JSD reads, at most ``k``: all of them when ``n <= k``; else runs of consecutive
    indices (up to :data:`QUERY_RUN` long, at least :data:`QUERY_RUNS` runs when ``k`` allows) whose starts are
    spread evenly, the first run at 0 and the last ending at ``n - 1``.

    Runs, not single rows: a record recomputes a block of rows at once several times faster per row than one row
    at a time, and the runs still sample the whole text.
    """
    if n <= k:
        return list(range(n))
    run = max(1, min(QUERY_RUN, k // QUERY_RUNS))
    starts = spread(n - run + 1, max(1, k // run))
    return sorted({start + i for start in starts for i in range(run)})


def _runs(positions: Sequence[int], longest: int) -> list[tuple[int, int]]:
    """Sorted positions as (start, end) runs of consecutive ones, each at most ``longest`` long."""
    runs: list[tuple[int, int]] = []
    for p in positions:
        if runs and runs[-1][1] == p and p - runs[-1][0] < longest:
            runs[-1] = (runs[-1][0], p + 1)
        else:
            runs.append((p, p + 1))
    return runs


def aligned_rows(
    record: AttentionRecord, layer: int, queries: Sequence[int], keys: Tensor, head: int | None = None
) -> tuple[Tensor, Tensor]:
    """Every head's (or ``head``'s) full-resolution rows for ``queries``, at the ``keys`` columns: ((n_head, Q, K)
    weights, or (Q, K) for one head; (Q, K) bool, True where the layer's mask lets the query see the key). Read a
    run of consecutive rows at a time."""
    k_len = record.k_len
    weights, visible = [], []
    for r0, r1 in _runs(queries, max(1, WINDOW_CELLS // k_len)):
        weights.append(record.weights(layer, head, (r0, r1), (0, k_len))[..., keys])  # ([n_head,] R, K)
        visible.append(record.keys(layer).block(r0, r1, 0, k_len)[:, keys])  # (R, K)
    return torch.cat(weights, dim=-2).float(), torch.cat(visible, dim=0)


def _restricted(weights: Tensor) -> tuple[Tensor, Tensor]:
    """Rows renormalised over the columns kept: (..., K) -> (distributions (..., K), mass (...))."""
    mass = weights.sum(dim=-1)
    return weights / mass.clamp_min(1e-30)[..., None], mass


@dataclass(frozen=True, eq=False)
class _JsdPlan:
    """What :func:`head_jsd` reads: the aligned queries of A and B (positions), the aligned keys, rows per chunk."""

    q_a: list[int]
    q_b: list[int]
    k_a: Tensor
    k_b: Tensor
    chunk: int


def _jsd_plan(alignment: Alignment, n_head: int, max_queries: int) -> _JsdPlan:
    picked = jsd_rows(len(alignment), max_queries)
    k_a, k_b = torch.tensor(alignment.a, dtype=torch.long), torch.tensor(alignment.b, dtype=torch.long)
    chunk = max(1, CHUNK_ELEMENTS // max(1, n_head * len(k_a)))
    return _JsdPlan([alignment.a[i] for i in picked], [alignment.b[i] for i in picked], k_a, k_b, chunk)


def _layer_jsd(
    record_a: AttentionRecord, record_b: AttentionRecord, plan: _JsdPlan, layer: int
) -> tuple[Tensor, Tensor]:
    """One layer's JSD summed over the compared queries, and how many were compared: ((n_head,) float64, (n_head,))."""
    total = torch.zeros(record_a.n_head, dtype=torch.float64)
    count = torch.zeros(record_a.n_head, dtype=torch.long)
    for c0 in range(0, len(plan.q_a), plan.chunk):
        w_a, v_a = aligned_rows(record_a, layer, plan.q_a[c0 : c0 + plan.chunk], plan.k_a)  # (n_head, Q, K), (Q, K)
        w_b, v_b = aligned_rows(record_b, layer, plan.q_b[c0 : c0 + plan.chunk], plan.k_b)
        p, mass_a = _restricted(w_a)
        q, mass_b = _restricted(w_b)
        live = (v_a.sum(dim=-1) >= 2) & (v_b.sum(dim=-1) >= 2)  # (Q,)
        ok = live & (mass_a >= MIN_MASS) & (mass_b >= MIN_MASS)  # (n_head, Q)
        divergence = jensen_shannon(p, q)  # (n_head, Q)
        total += torch.where(ok, divergence, 0.0).sum(dim=-1).double()
        count += ok.sum(dim=-1)
    return total, count


def _check_shapes(record_a: AttentionRecord, record_b: AttentionRecord) -> None:
    if (record_a.n_layer, record_a.n_head) != (record_b.n_layer, record_b.n_head):
        raise ValueError(
            msg(
                "compare_lib.shapes_differ",
                a=f"{record_a.n_layer} x {record_a.n_head}",
                b=f"{record_b.n_layer} x {record_b.n_head}",
            )
        )


def head_jsd(
    record_a: AttentionRecord,
    record_b: AttentionRecord,
    alignment: Alignment,
    max_queries: int = JSD_QUERIES,
    progress: Progress | None = None,
) -> pd.DataFrame:
    """Per head, the mean JSD (bits) between A's and B's rows for the aligned queries, over the aligned keys.

    One row per head: layer, head, ``jsd`` (NaN where no query could be compared) and ``n_queries`` (how many
    were). At most ``max_queries`` aligned queries are read (:func:`jsd_rows`); a query is compared where it sees
    at least two aligned keys in both records (a row with one key is one-hot whatever the head does) and puts at
    least :data:`MIN_MASS` of its weight on them in both. ``progress`` gets a stage "progress.layer" and a step per
    layer. ValueError when the records' heads differ in shape.
    """
    _check_shapes(record_a, record_b)
    n_layer, n_head = record_a.n_layer, record_a.n_head
    progress = or_none(progress)
    progress.stage("progress.layer", n_layer)
    plan = _jsd_plan(alignment, n_head, max_queries)
    total = torch.zeros(n_layer, n_head, dtype=torch.float64)
    count = torch.zeros(n_layer, n_head, dtype=torch.long)
    for layer in range(n_layer):
        if plan.q_a:
            total[layer], count[layer] = _layer_jsd(record_a, record_b, plan, layer)
        progress.step()
    jsd = torch.where(count > 0, total / count.clamp_min(1), torch.nan)
    return pd.DataFrame(
        {
            "layer": [layer for layer in range(n_layer) for _ in range(n_head)],
            "head": [head for _ in range(n_layer) for head in range(n_head)],
            "jsd": jsd.reshape(-1).numpy(),
            "n_queries": count.reshape(-1).numpy(),
        }
    )


def measured_seconds(
    record_a: AttentionRecord,
    record_b: AttentionRecord,
    alignment: Alignment,
    max_queries: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """How long :func:`compare_records` will take on this machine, now: the JSD's layers cost alike (the same
    queries, keys and heads), so its first layers are run and timed until :data:`MEASURE_SECONDS` have passed
    (three at least, unless the model has only two: then one; the first left out once there are two, as it
    carries the warm-up), and the median layer is counted ``n_layer`` times. 0 where the heads differ in shape or no query aligns (nothing is
    read). The statistics' difference is a table of a few hundred rows: nothing beside the rows.
    """
    if (record_a.n_layer, record_a.n_head) != (record_b.n_layer, record_b.n_head) or not len(alignment):
        return 0.0
    if max_queries is None:
        max_queries = jsd_queries(record_a.n_layer, record_a.n_head, max(record_a.k_len, record_b.k_len))
    plan = _jsd_plan(alignment, record_a.n_head, max_queries)
    durations: list[float] = []
    for layer in range(record_a.n_layer):
        start = clock()
        _layer_jsd(record_a, record_b, plan, layer)
        durations.append(clock() - start)
        if sum(durations) >= MEASURE_SECONDS and len(durations) >= (1 if record_a.n_layer <= 2 else 3):
            break
    warm = sorted(durations[1:] if len(durations) >= 2 else durations)
    return warm[len(warm) // 2] * record_a.n_layer  # the median: one layer slowed by another job does not count


def rounded(value: float, digits: int = 3) -> float:
    """``value`` to ``digits`` significant digits, and 0 where it is below :data:`FLOAT_FLOOR` (float32
    rounding, never a real change: 2e-15 is shown as 0); NaN stays NaN."""
    if not math.isfinite(value):
        return value
    if abs(value) < FLOAT_FLOOR:
        return 0.0
    return float(f"{value:.{digits}g}")


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

    def most_moved(self) -> tuple[int, int] | None:
        """(layer, head) of the head whose pattern moved most (the largest JSD); None where none was compared."""
        if self.jsd is None or not self.jsd["jsd"].notna().any():
            return None
        row = self.jsd.loc[self.jsd["jsd"].idxmax()]
        return int(row["layer"]), int(row["head"])

    def largest(self, statistic: str | None = None, n: int = LARGEST, digits: int | None = None) -> pd.DataFrame:
        """The ``n`` heads that changed most: by |b − a| of ``statistic``, or by JSD when None.

        Columns: layer, head, ``jsd``, and for a statistic its ``a``, ``b`` and ``diff``; with ``digits``, each
        value :func:`rounded` to that many significant digits (what a reader is shown). Empty when the heads
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
        table = table.iloc[picked].reset_index(drop=True)
        if digits is not None:
            for column in table.columns[2:]:
                table[column] = [rounded(float(v), digits) for v in table[column]]
        return table


def align_records(record_a: AttentionRecord, record_b: AttentionRecord) -> Alignment:
    """:func:`align_tokens` on the two records' tokens (their text)."""
    return align_tokens([t.text for t in record_a.tokens], [t.text for t in record_b.tokens])


def compare_records(
    record_a: AttentionRecord,
    record_b: AttentionRecord,
    max_queries: int | None = None,
    progress: Progress | None = None,
    alignment: Alignment | None = None,
) -> Comparison:
    """Statistics, their difference and the patterns' JSD of two records (see the module docstring).

    ``max_queries``: aligned queries read per head (None: :func:`jsd_queries`); ``progress``: a step per layer
    of the JSD; ``alignment``: :func:`align_records` already done. ValueError when either record has no token.
    """
    if not record_a.tokens or not record_b.tokens:
        raise ValueError(msg("compare_lib.no_tokens"))
    alignment = align_records(record_a, record_b) if alignment is None else alignment
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
    jsd = head_jsd(record_a, record_b, alignment, max_queries, progress)
    return Comparison(record_a, record_b, columns, alignment, diff, jsd, queries=min(max_queries, len(alignment)))

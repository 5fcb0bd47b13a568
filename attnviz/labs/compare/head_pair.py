"""One head in A and in B, and B − A where the tokens align: the maps the page draws side by side.

At full resolution up to :data:`~attnviz.core.capture.FULL_VIEW_TOKENS` aligned tokens; past that, B − A is read a
chunk of whole bins at a time and pooled as it goes, each bin keeping its largest change with its sign
(:func:`pool_signed`), so memory and time stay bounded at any length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.core.admission import Need
from attnviz.core.capture import FULL_VIEW_TOKENS, WINDOW_CELLS
from attnviz.i18n.message import msg
from attnviz.labs.compare.comparison import (
    CHUNK_ELEMENTS,
    FLOPS_PER_SECOND,
    Comparison,
    aligned_rows,
    cell_flops,
)
from attnviz.models.record import AttentionRecord

MAP_SIDE = 256  # one head's B − A map past FULL_VIEW_TOKENS aligned tokens: pooled to at most this many bins a side
DIFF_CELLS = 2**23  # ... and read at most about this many weights of each record (every k-th query of a bin past it)

# the process's peak a weight of a chunk: both records' rows and masks, B − A and its masked copy, the pooling's padded
# copy, its bins and their NaN-filled copies (23 and 29 B measured: 3,219 aligned tokens, 5.2 M weights a chunk)
PAIR_BYTES_PER_CELL = 32
RUN_SECONDS = 1.5e-4  # a run of rows read back, besides its flops (0.14 to 0.16 ms measured for one row of 3,220 keys)
Span = tuple[int, int]  # the token positions start..end-1 one row or column of a map stands for


@dataclass(frozen=True, eq=False)
class HeadPair:
    """One head in A and in B, and how it changed where the tokens align.

    a, b: the head's weights (rows, cols) as float32, NaN where the mask hides the key: at full resolution up to
    :data:`FULL_VIEW_TOKENS` tokens, else the record's max-pooled map. diff: B − A over the aligned queries x the
    aligned keys (a key hidden on one side counts 0 there; NaN where hidden on both), at full resolution up to
    :data:`FULL_VIEW_TOKENS` aligned tokens, else pooled to at most :data:`MAP_SIDE` bins a side, each bin keeping
    its largest change with its sign. a_spans, b_spans: the positions each row (and column) of ``a`` and ``b``
    stands for in its own text; diff_spans: in A's text. stride: B − A read every ``stride``-th aligned query of
    each bin (1: every one; more only past :data:`DIFF_CELLS` weights).
    """

    layer: int
    head: int
    a: Tensor
    b: Tensor
    diff: Tensor
    a_spans: list[Span]
    b_spans: list[Span]
    diff_spans: list[Span]
    stride: int = 1

    @property
    def nbytes(self) -> int:
        return sum(x.numel() * x.element_size() for x in (self.a, self.b, self.diff))


def _head_map(record: AttentionRecord, layer: int, head: int) -> tuple[Tensor, list[Span]]:
    """One head's map as drawn: whole (masked keys NaN) when the record is short enough, else max-pooled."""
    if record.full_view:
        weights = record.weights(layer, head).float()  # (q_len, k_len)
        weights = weights.masked_fill(~record.mask(layer), math.nan)
        return weights, [(i, i + 1) for i in range(record.q_len)]
    size = record.bin_size
    pooled = record.pooled(layer, head, "max").float()  # (ceil(q_len / size), ceil(k_len / size))
    return pooled, [(i, min(i + size, record.q_len)) for i in range(0, record.q_len, size)]


def pool_signed(values: Tensor, size: int, row_size: int | None = None) -> Tensor:
    """(R, C) -> (ceil(R / row_size), ceil(C / size)): each bin of ``row_size`` rows (default ``size``) x ``size``
    columns keeps its value of largest magnitude, with its sign; NaN cells are left out, and a bin of NaN only is
    NaN."""
    row_size = size if row_size is None else row_size
    if size == 1 and row_size == 1:
        return values
    rows, cols = values.shape
    padded = torch.full((-(-rows // row_size) * row_size, -(-cols // size) * size), math.nan)
    padded[:rows, :cols] = values
    shape = (padded.shape[0] // row_size, row_size, padded.shape[1] // size, size)
    bins = padded.view(shape).transpose(1, 2).flatten(2)  # (R', C', row_size x size)
    high = bins.nan_to_num(nan=-math.inf).amax(dim=-1)  # (R', C')
    low = bins.nan_to_num(nan=math.inf).amin(dim=-1)
    pooled = torch.where(high.abs() >= low.abs(), high, low)
    return pooled.masked_fill(bins.isnan().all(dim=-1), math.nan)


def diff_plan(n: int, max_side: int = MAP_SIDE, max_cells: int = DIFF_CELLS) -> tuple[int, int]:
    """How B − A is read over ``n`` aligned tokens: (bin size, stride): whole up to :data:`FULL_VIEW_TOKENS`, else
    bins of ``size`` tokens (at most ``max_side`` a side), every ``stride``-th query of a bin where every row would
    be more than ``max_cells`` weights."""
    size = 1 if n <= FULL_VIEW_TOKENS else math.ceil(n / max_side)
    return size, min(size, max(1, math.ceil(n * n / max_cells)))


def diff_rows(n: int, max_side: int = MAP_SIDE, max_cells: int = DIFF_CELLS) -> int:
    """How many aligned query rows :func:`head_pair` reads of each record for B − A (:func:`diff_plan`)."""
    size, stride = diff_plan(n, max_side, max_cells)
    return (n // size) * math.ceil(size / stride) + math.ceil((n % size) / stride)


def head_pair_seconds(comparison: Comparison, max_side: int = MAP_SIDE, max_cells: int = DIFF_CELLS) -> float:
    """The predicted time of :func:`head_pair` on one CPU core, at the comparison's own rate
    (:data:`~attnviz.labs.compare.FLOPS_PER_SECOND`): in each record, the head's whole map where it is drawn at full
    resolution (a pooled map is kept, nothing to compute) and the rows B − A reads (:func:`diff_rows`), each weight
    recomputed at :func:`~attnviz.labs.compare.comparison.cell_flops`, and :data:`RUN_SECONDS` for each run of rows
    read at once (every row its own where a bin's rows are strided; else as many as a window holds); the pooling is
    a few passes over them."""
    n = len(comparison.alignment)
    rows, (_, stride) = diff_rows(n, max_side, max_cells), diff_plan(n, max_side, max_cells)
    seconds = 0.0
    for record in (comparison.a, comparison.b):
        cells = rows * record.k_len + (record.q_len * record.k_len if record.full_view else 0)
        runs = rows if stride > 1 else math.ceil(rows / max(1, WINDOW_CELLS // record.k_len))
        seconds += cells * cell_flops(record) / FLOPS_PER_SECOND + (runs + 1) * RUN_SECONDS
    return seconds


def head_pair_need(comparison: Comparison, max_side: int = MAP_SIDE, max_cells: int = DIFF_CELLS) -> Need:
    """What :func:`head_pair` costs (:class:`~attnviz.core.admission.Need`), on the host (records keep q and k
    there): a chunk of both records' rows at its peak (:data:`PAIR_BYTES_PER_CELL` a weight of
    :data:`~attnviz.labs.compare.CHUNK_ELEMENTS`), and :func:`head_pair_seconds`."""
    return Need(PAIR_BYTES_PER_CELL * CHUNK_ELEMENTS, head_pair_seconds(comparison, max_side, max_cells))


def head_pair(
    comparison: Comparison,
    layer: int,
    head: int,
    max_side: int = MAP_SIDE,
    chunk_elements: int = CHUNK_ELEMENTS,
    max_cells: int = DIFF_CELLS,
) -> HeadPair:
    """One head of ``comparison`` in A, in B and B − A (:class:`HeadPair`). Past :data:`FULL_VIEW_TOKENS`
    aligned tokens, B − A is read a chunk of whole bins at a time (``chunk_elements`` weights of each record) and
    pooled as it goes, so memory stays bounded at any length; and where every aligned row would be more than
    ``max_cells`` weights, every ``stride``-th query of each bin is read (:attr:`HeadPair.stride`), so the time is
    bounded too. ValueError where the heads were not compared or there is no such head."""
    if comparison.jsd is None:
        raise ValueError(msg("compare_lib.not_compared"))
    if not (0 <= layer < comparison.a.n_layer and 0 <= head < comparison.a.n_head):
        raise ValueError(msg("compare_lib.no_head", layer=layer, head=head))
    record_a, record_b, alignment = comparison.a, comparison.b, comparison.alignment
    map_a, spans_a = _head_map(record_a, layer, head)
    map_b, spans_b = _head_map(record_b, layer, head)
    n = len(alignment)
    size, stride = diff_plan(n, max_side, max_cells)
    per_bin = math.ceil(size / stride)  # rows read of every whole bin
    k_a, k_b = torch.tensor(alignment.a, dtype=torch.long), torch.tensor(alignment.b, dtype=torch.long)
    bins = max(1, chunk_elements // max(1, n * per_bin))  # bins a chunk
    parts = []
    for b0 in range(0, n, size * bins):
        picked = [
            i for start in range(b0, min(b0 + size * bins, n), size) for i in range(start, min(start + size, n), stride)
        ]
        w_a, v_a = aligned_rows(record_a, layer, [alignment.a[i] for i in picked], k_a, head)  # (R, N), (R, N)
        w_b, v_b = aligned_rows(record_b, layer, [alignment.b[i] for i in picked], k_b, head)
        change = (w_b - w_a).masked_fill(~(v_a | v_b), math.nan)  # hidden keys weigh 0; NaN hidden on both
        parts.append(pool_signed(change, size, per_bin))
    diff = torch.cat(parts) if parts else torch.zeros(0, 0)
    spans = [(alignment.a[i], alignment.a[min(i + size, n) - 1] + 1) for i in range(0, n, size)]
    return HeadPair(layer, head, map_a, map_b, diff, spans_a, spans_b, spans, stride)

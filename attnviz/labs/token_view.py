"""One token's attention: what it attends to, what attends to it, in every head and every layer.

Everything comes from the record's kept q, k and log-sum-exps through
:func:`~attnviz.core.capture.weights_window`, one row or one column at a time, so a
512-token input never materialises (n_head, T, T). A column is computed in
chunks of rows, so its memory stays bounded however long the input is.

Cells a query may not see (a decoder's future, a pad) are NaN, not 0: a figure
greys them, and a zero weight stays distinguishable from "could not attend".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.core.capture import weights_window
from attnviz.core.value_norms import value_weighted
from attnviz.i18n.message import Message, msg
from attnviz.models.record import AttentionRecord

ATTENDS_TO = "attends_to"
ATTENDED_BY = "attended_by"
DIRECTIONS = {ATTENDS_TO: "attends to (its query row)", ATTENDED_BY: "is attended by (its key column)"}  # English
REDUCTIONS = ("mean", "sum")
COLUMN_CHUNK = 4096  # query rows per weights_window call for a column: (n_head, 4096, 1) floats at a time
LINE_VIEW_TOKENS = 64  # the line view draws every pair of tokens, so it stops here
WINDOW_TOKENS = 128  # the running text shows one page of this many tokens: readable at any length
OVERVIEW_BINS = 128  # the overview of a whole text sums its weights into at most this many bins of tokens


def direction_label(direction: str) -> Message:
    """A direction's name, to show (DIRECTIONS' text), for a widget's format_func."""
    return msg(f"token_view_lib.{direction}")


def _check_token(record: AttentionRecord, token: int, length: int | None = None) -> int:
    length = record.q_len if length is None else length
    if isinstance(token, bool) or not 0 <= int(token) < length:
        raise ValueError(msg("token_view_lib.token_range", token=repr(token), length=length, last=length - 1))
    return int(token)


def _check_layer(record: AttentionRecord, layer: int) -> int:
    if not 0 <= int(layer) < record.n_layer:
        raise ValueError(
            msg("token_view_lib.layer_range", layer=layer, n_layer=record.n_layer, last=record.n_layer - 1)
        )
    return int(layer)


def _check_direction(direction: str) -> str:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {list(DIRECTIONS)}, not {direction!r}")
    return direction


def token_row(record: AttentionRecord, layer: int, token: int) -> Tensor:
    """What ``token`` attends to in every head of ``layer``: its query row, (n_head, k_len), NaN where masked."""
    layer, token = _check_layer(record, layer), _check_token(record, token)
    rows, cols = (token, token + 1), (0, record.k_len)
    weights = weights_window(record.layers[layer], None, rows, cols)[:, 0]  # (n_head, k_len)
    visible = record.mask(layer, rows, cols)[0]  # (k_len,)
    return weights.masked_fill(~visible, math.nan)


def token_column(record: AttentionRecord, layer: int, token: int, chunk: int = COLUMN_CHUNK) -> Tensor:
    """What attends to ``token`` in every head of ``layer``: its key column, (n_head, q_len), NaN where masked.

    Rows come ``chunk`` at a time, so memory is (n_head, chunk) whatever q_len is.
    """
    layer, token = _check_layer(record, layer), _check_token(record, token, record.k_len)
    cols = (token, token + 1)
    parts = []
    for r0 in range(0, record.q_len, chunk):
        rows = (r0, min(record.q_len, r0 + chunk))
        weights = weights_window(record.layers[layer], None, rows, cols)[:, :, 0]  # (n_head, rows)
        visible = record.mask(layer, rows, cols)[:, 0]  # (rows,)
        parts.append(weights.masked_fill(~visible, math.nan))
    return torch.cat(parts, dim=1)  # (n_head, q_len)


def token_weights(record: AttentionRecord, layer: int, token: int, direction: str, values: bool = False) -> Tensor:
    """:func:`token_row` or :func:`token_column` by ``direction``: (n_head, T).

    ``values``: value-weighted, ‖α_ij · v_j W_O^h‖ (:func:`value_weighted_weights`).
    """
    if _check_direction(direction) == ATTENDS_TO:
        weights = token_row(record, layer, token)
    else:
        weights = token_column(record, layer, token)
    return value_weighted_weights(record, layer, token, direction, weights) if values else weights


def value_weighted_weights(record: AttentionRecord, layer: int, token: int, direction: str, weights: Tensor) -> Tensor:
    """A token's row or column of weights (n_head, T) times the value norms of its keys (Kobayashi et al. 2020).

    A row (what ``token`` attends to) scales each key j by ‖v_j W_O^h‖; a column (what attends to ``token``)
    has one key, ``token``, so every cell scales by its norm. ValueError without value norms.
    """
    norms = record.value_norms(layer)  # (n_head, k_len)
    if _check_direction(direction) == ATTENDS_TO:
        return value_weighted(weights[:, None], norms)[:, 0]  # one query row over every key
    return weights * norms[:, token : token + 1]  # one key: every query scales by its norm


def across_layers(record: AttentionRecord, token: int, direction: str = ATTENDS_TO, values: bool = False) -> Tensor:
    """``token``'s row or column in every layer and head: (n_layer, n_head, T), NaN where masked."""
    _check_direction(direction)
    return torch.stack([token_weights(record, layer, token, direction, values) for layer in range(record.n_layer)])


def selected_tokens(
    record: AttentionRecord,
    layer: int,
    tokens: list[int],
    reduce: str = "mean",
    direction: str = ATTENDS_TO,
    values: bool = False,
) -> Tensor:
    """Several tokens' rows (or columns) combined, per head: (n_head, T).

    A masked cell counts as weight 0 (which it is: the softmax gave it nothing), so
    the mean of several rows is still a distribution over the keys; a cell that
    every selected token has masked stays NaN.
    """
    if reduce not in REDUCTIONS:
        raise ValueError(f"reduce must be one of {list(REDUCTIONS)}, not {reduce!r}")
    if not tokens:
        raise ValueError(msg("token_view_lib.select_one"))
    stacked = torch.stack(
        [token_weights(record, layer, tok, direction, values) for tok in tokens]
    )  # (n_sel, n_head, T)
    masked = stacked.isnan().all(dim=0)  # (n_head, T)
    zeroed = stacked.nan_to_num(0.0)
    combined = zeroed.mean(dim=0) if reduce == "mean" else zeroed.sum(dim=0)  # (n_head, T)
    return combined.masked_fill(masked, math.nan)


def layer_weights(record: AttentionRecord, layer: int) -> Tensor:
    """Every head of one layer for a short input: (n_head, T, T), NaN where masked; for the line view."""
    layer = _check_layer(record, layer)
    if max(record.q_len, record.k_len) > LINE_VIEW_TOKENS:
        raise ValueError(msg("token_view_lib.line_view_limit", limit=LINE_VIEW_TOKENS, q_len=record.q_len))
    weights = weights_window(record.layers[layer], None, (0, record.q_len), (0, record.k_len))  # (n_head, T, T)
    return weights.masked_fill(~record.mask(layer), math.nan)


def head_row(weights: Tensor, head: int | str) -> Tensor:
    """One head's row of (n_head, T) weights, or the mean over heads for ``"mean"``: (T,), NaN where masked."""
    if head == "mean":
        return weights.nanmean(dim=0)  # a cell every head masks stays NaN
    if not 0 <= int(head) < weights.shape[0]:
        raise ValueError(f"head {head} is out of range: the weights have {weights.shape[0]} heads")
    return weights[int(head)]


def heads_and_mean(weights: Tensor) -> Tensor:
    """(n_head, T) weights with the mean over heads as one more row: (n_head + 1, T)."""
    return torch.cat([weights, head_row(weights, "mean")[None]])


def n_pages(n_tok: int, size: int = WINDOW_TOKENS) -> int:
    """How many pages of ``size`` tokens a text of ``n_tok`` tokens fills (the last may be shorter)."""
    if size < 1 or n_tok < 1:
        raise ValueError(f"a page of {size} tokens over {n_tok} tokens: both must be at least 1")
    return -(-n_tok // size)


def page_of(token: int, size: int = WINDOW_TOKENS) -> int:
    """The page that shows ``token``."""
    return int(token) // size


def page_bounds(n_tok: int, page: int, size: int = WINDOW_TOKENS) -> tuple[int, int]:
    """Page ``page``'s tokens as (start, stop), stop excluded: pages are fixed blocks of ``size`` tokens."""
    last = n_pages(n_tok, size) - 1
    if isinstance(page, bool) or not 0 <= int(page) <= last:
        raise ValueError(f"page {page} is out of range: {n_tok} tokens make pages 0 to {last} of {size} tokens")
    start = int(page) * size
    return start, min(n_tok, start + size)


@dataclass(frozen=True)
class WindowShare:
    """How a row's weight splits around a window of tokens [start, stop): each (n_row,), float64.

    Masked cells count as 0, so before + inside + after is the row's total (1 for a query row
    a softmax made; any sum for a key column).
    """

    start: int
    stop: int
    before: Tensor
    inside: Tensor
    after: Tensor

    @property
    def total(self) -> Tensor:
        return self.before + self.inside + self.after


def window_share(weights: Tensor, start: int, stop: int) -> WindowShare:
    """The weight of (n_row, T) ``weights`` that lies before, inside and after the window [start, stop)."""
    if weights.ndim != 2 or not 0 <= start < stop <= weights.shape[1]:
        raise ValueError(f"window [{start}, {stop}) does not fit weights of shape {tuple(weights.shape)}")
    w = weights.detach().double().nan_to_num(0.0)  # (n_row, T); float64 so the three parts add up to the total
    return WindowShare(start, stop, w[:, :start].sum(-1), w[:, start:stop].sum(-1), w[:, stop:].sum(-1))


@dataclass(frozen=True)
class PooledOverview:
    """Weights summed over bins of consecutive tokens: ``sums`` (n_row, n_bin), float64, NaN where a whole
    bin is masked; bin ``i`` holds tokens ``edges[i]`` to ``edges[i + 1] - 1``."""

    sums: Tensor
    edges: tuple[int, ...]

    @property
    def bin_size(self) -> int:
        return self.edges[1] - self.edges[0]


def pooled_overview(weights: Tensor, n_bins: int = OVERVIEW_BINS) -> PooledOverview:
    """Where a row's weight goes across a whole text: (n_row, T) -> the sum over each bin of tokens.

    Bins hold ceil(T / n_bins) tokens each (the last may hold fewer), so a text of any length is at
    most ``n_bins`` columns; the bins of a row add up to the row's total (masked cells count as 0).
    """
    if weights.ndim != 2 or n_bins < 1:
        raise ValueError(f"weights of shape {tuple(weights.shape)} and {n_bins} bins: need (n_row, T) and >= 1 bin")
    n_row, T = weights.shape
    size = -(-T // n_bins)
    n = -(-T // size)
    padded = torch.full((n_row, n * size), math.nan, dtype=torch.float64)
    padded[:, :T] = weights.detach().double()
    bins = padded.view(n_row, n, size)  # (n_row, n_bin, size)
    sums = bins.nansum(-1).masked_fill(bins.isnan().all(-1), math.nan)  # (n_row, n_bin)
    return PooledOverview(sums, (*range(0, T, size), T))

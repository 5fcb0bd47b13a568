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

import torch
from torch import Tensor

from attnviz.core.capture import weights_window
from attnviz.i18n.message import Message, msg
from attnviz.models.record import AttentionRecord

ATTENDS_TO = "attends_to"
ATTENDED_BY = "attended_by"
DIRECTIONS = {ATTENDS_TO: "attends to (its query row)", ATTENDED_BY: "is attended by (its key column)"}  # English
REDUCTIONS = ("mean", "sum")
COLUMN_CHUNK = 4096  # query rows per weights_window call for a column: (n_head, 4096, 1) floats at a time
LINE_VIEW_TOKENS = 64  # the line view draws every pair of tokens, so it stops here


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


def token_weights(record: AttentionRecord, layer: int, token: int, direction: str) -> Tensor:
    """:func:`token_row` or :func:`token_column` by ``direction``: (n_head, T)."""
    if _check_direction(direction) == ATTENDS_TO:
        return token_row(record, layer, token)
    return token_column(record, layer, token)


def across_layers(record: AttentionRecord, token: int, direction: str = ATTENDS_TO) -> Tensor:
    """``token``'s row or column in every layer and head: (n_layer, n_head, T), NaN where masked."""
    _check_direction(direction)
    return torch.stack([token_weights(record, layer, token, direction) for layer in range(record.n_layer)])


def selected_tokens(
    record: AttentionRecord, layer: int, tokens: list[int], reduce: str = "mean", direction: str = ATTENDS_TO
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
    stacked = torch.stack([token_weights(record, layer, tok, direction) for tok in tokens])  # (n_sel, n_head, T)
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

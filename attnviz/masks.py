"""Mask builders, all in one convention: a bool tensor, True where a query *may attend*.

This is the convention of ``torch.nn.functional.scaled_dot_product_attention``
(and the opposite of ``torch.nn.MultiheadAttention``'s ``key_padding_mask``,
where True means *ignore*: a classic source of mask bugs). Every builder
returns a shape that broadcasts to ``(batch, n_head, q_len, k_len)``; combine
masks with ``&``. ``attention.mask_to_additive`` turns one into 0/-inf.

With a KV cache the queries are the last ``q_len`` of ``k_len`` positions, so
query ``i`` sits at absolute position ``offset + i`` with ``offset = k_len - q_len``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def _offset(q_len: int, k_len: int, offset: int | None) -> int:
    if q_len < 0 or k_len < 0:
        raise ValueError(f"q_len ({q_len}) and k_len ({k_len}) must be non-negative")
    offset = k_len - q_len if offset is None else offset
    if offset < 0:
        raise ValueError(f"offset ({offset}) must be >= 0 (q_len={q_len}, k_len={k_len})")
    return offset


def causal_mask(
    q_len: int, k_len: int | None = None, offset: int | None = None, device: torch.device | str | None = None
) -> Tensor:
    """Lower-triangular "no peeking at the future" mask: (q_len, k_len).

    Query ``i`` (absolute position ``offset + i``) may attend to key ``j`` iff
    ``j <= offset + i``. ``k_len`` defaults to ``q_len``; ``offset`` defaults to
    ``k_len - q_len`` (the number of cached tokens).
    """
    k_len = q_len if k_len is None else k_len
    offset = _offset(q_len, k_len, offset)
    q_pos = torch.arange(q_len, device=device)[:, None] + offset  # (q_len, 1)
    k_pos = torch.arange(k_len, device=device)[None, :]  # (1, k_len)
    return k_pos <= q_pos  # (q_len, k_len)


def sliding_window_mask(
    q_len: int,
    window: int,
    k_len: int | None = None,
    offset: int | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Causal mask that also forgets keys ``window`` or more positions back: (q_len, k_len).

    Query at absolute position ``p`` may attend to keys ``p - window + 1 .. p``, so each
    row sees at most ``window`` keys (itself included).
    """
    if window < 1:
        raise ValueError(f"window ({window}) must be >= 1")
    k_len = q_len if k_len is None else k_len
    offset = _offset(q_len, k_len, offset)
    q_pos = torch.arange(q_len, device=device)[:, None] + offset  # (q_len, 1)
    k_pos = torch.arange(k_len, device=device)[None, :]  # (1, k_len)
    return (k_pos <= q_pos) & (q_pos - k_pos < window)  # (q_len, k_len)


def padding_mask(
    lengths: Sequence[int] | Tensor,
    max_len: int | None = None,
    side: str = "right",
    device: torch.device | str | None = None,
) -> Tensor:
    """Key mask from sequence lengths: (batch, 1, 1, max_len), True on real tokens.

    ``side="right"`` puts the pads after the tokens, ``side="left"`` before them
    (as decoders are batched for generation). Broadcasts over heads and queries.
    """
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', not {side!r}")
    lengths = torch.as_tensor(lengths, device=device).long()  # (batch,)
    if lengths.ndim != 1:
        raise ValueError(f"lengths must be 1-D, got shape {tuple(lengths.shape)}")
    longest = int(lengths.max()) if lengths.numel() else 0
    max_len = longest if max_len is None else max_len
    if bool((lengths < 0).any()) or longest > max_len:
        raise ValueError(f"lengths {lengths.tolist()} must lie in [0, max_len={max_len}]")
    pos = torch.arange(max_len, device=lengths.device)[None, :]  # (1, max_len)
    if side == "right":
        keep = pos < lengths[:, None]  # (batch, max_len)
    else:
        keep = pos >= (max_len - lengths)[:, None]
    return keep[:, None, None, :]  # (batch, 1, 1, max_len)


def pad_row(row: list, length: int, pad, side: str = "right") -> list:
    """A list padded with ``pad`` to ``length`` on ``side`` (the layout ``padding_mask`` describes)."""
    fill = [pad] * (length - len(row))
    return row + fill if side == "right" else fill + row


def positions_from_mask(key_mask: Tensor) -> Tensor:
    """Position of each token counting real tokens only: (batch, T) -> (batch, T).

    Left padding then does not shift the positions of the real tokens (pads get 0).
    """
    return (key_mask.long().cumsum(-1) - 1).clamp_min(0)


def visible_keys(mask: Tensor | None, q_len: int, k_len: int) -> Tensor:
    """How many keys each query may attend to, broadcast to (..., q_len)."""
    if mask is None:
        return torch.full((q_len,), k_len)
    if mask.dtype != torch.bool:
        mask = ~torch.isneginf(mask)
    mask = mask.expand(*mask.shape[:-2], q_len, k_len)
    return mask.sum(dim=-1)  # (..., q_len)

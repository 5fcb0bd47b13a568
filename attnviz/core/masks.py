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

import operator
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.i18n.message import Message, msg


def _size(name: str, value: object) -> int:
    """``value`` as a python int: ints and integer numpy/torch scalars pass; floats and bools raise ValueError.

    ``causal_mask(2.5)`` would otherwise build a mask for some rounding of 2.5,
    and ``True`` would pass as 1.
    """
    if isinstance(value, bool) or (isinstance(value, Tensor) and value.dtype == torch.bool):
        raise ValueError(f"{name} must be an integer, got the bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {value!r} ({type(value).__name__})") from None


def _lengths(
    lengths: Sequence[int] | Tensor, device: torch.device | str | None = None
) -> tuple[Tensor, torch.device | str | None]:
    """Sequence lengths as an int64 (batch,) tensor on the host, and the device a mask from them is built on:
    ``device``, else the lengths' own when they are a tensor. ValueError unless they are 1-D non-negative integers.

    The checks read the values, so they run on a host copy: lengths given as a list are never sent to a GPU only
    to be read back (a wait for the GPU each time).
    """
    given = lengths
    target = device if device is not None or not isinstance(lengths, Tensor) else lengths.device
    lengths = torch.as_tensor(lengths).cpu()
    if lengths.numel() == 0:
        lengths = lengths.long()
    if lengths.dtype == torch.bool or lengths.dtype.is_floating_point or lengths.dtype.is_complex:
        shown = given.tolist() if hasattr(given, "tolist") else list(given)
        raise ValueError(f"lengths must be integers, got {shown}")
    if lengths.ndim != 1:
        raise ValueError(f"lengths must be 1-D, got shape {tuple(lengths.shape)}")
    if bool((lengths < 0).any()):
        raise ValueError(f"lengths {lengths.tolist()} must be non-negative")
    return lengths.long(), target  # (batch,) on the host


def _offset(q_len: int, k_len: int, offset: int | None) -> int:
    q_len, k_len = _size("q_len", q_len), _size("k_len", k_len)
    if q_len < 0 or k_len < 0:
        raise ValueError(f"q_len ({q_len}) and k_len ({k_len}) must be non-negative")
    offset = k_len - q_len if offset is None else _size("offset", offset)
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
    q_len = _size("q_len", q_len)
    k_len = q_len if k_len is None else _size("k_len", k_len)
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
    window = _size("window", window)
    if window < 1:
        raise ValueError(f"window ({window}) must be >= 1")
    q_len = _size("q_len", q_len)
    k_len = q_len if k_len is None else _size("k_len", k_len)
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
    lengths, target = _lengths(lengths, device)  # (batch,) on the host
    longest = int(lengths.max()) if lengths.numel() else 0
    max_len = longest if max_len is None else _size("max_len", max_len)
    if longest > max_len:
        raise ValueError(f"lengths {lengths.tolist()} must lie in [0, max_len={max_len}]")
    lengths = lengths if target is None else lengths.to(target)
    pos = torch.arange(max_len, device=lengths.device)[None, :]  # (1, max_len)
    if side == "right":
        keep = pos < lengths[:, None]  # (batch, max_len)
    else:
        keep = pos >= (max_len - lengths)[:, None]
    return keep[:, None, None, :]  # (batch, 1, 1, max_len)


def prefix_lm_mask(q_len: int, prefix: int, device: torch.device | str | None = None) -> Tensor:
    """Prefix-LM mask: (q_len, q_len), bidirectional over the first ``prefix`` positions, causal after.

    Query ``i`` may attend to key ``j`` iff ``j <= i`` or ``j < prefix``: the
    prefix (a prompt, an image) sees itself whole, and every later position sees
    the prefix and its own past. ``prefix=0`` is :func:`causal_mask`;
    ``prefix >= q_len`` lets every query see every key.
    """
    q_len, prefix = _size("q_len", q_len), _size("prefix", prefix)
    if q_len < 0 or prefix < 0:
        raise ValueError(f"q_len ({q_len}) and prefix ({prefix}) must be non-negative")
    k_pos = torch.arange(q_len, device=device)[None, :]  # (1, q_len)
    return causal_mask(q_len, device=device) | (k_pos < prefix)  # (q_len, q_len)


def document_mask(
    lengths: Sequence[int] | Tensor, causal: bool = True, device: torch.device | str | None = None
) -> Tensor:
    """Block-diagonal mask for documents packed into one sequence: (T, T), T = sum(lengths).

    Each position attends only to the positions of its own document (and, when
    ``causal``, only to those at or before it), so packed documents cannot see
    one another. ``lengths`` are positive integers, in packing order.
    """
    lengths, target = _lengths(lengths, device)  # (n_doc,) on the host
    if bool((lengths == 0).any()):
        raise ValueError(f"lengths {lengths.tolist()} must be positive: a document has at least one token")
    doc = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)  # (T,) on the host: T depends on the values
    doc = doc if target is None else doc.to(target)
    keep = doc[:, None] == doc[None, :]  # (T, T)
    if causal:
        keep &= causal_mask(doc.numel(), device=doc.device)
    return keep


def batch_padding_keep(
    lengths: Sequence[int] | Tensor,
    max_len: int,
    side: str = "right",
    causal: bool = False,
    device: torch.device | str | None = None,
) -> Tensor:
    """The whole mask of a padded batch, per sequence: (batch, T, T) with T = max_len.

    Query ``i`` of sequence ``b`` may attend to key ``j`` iff ``j`` is a real
    token of ``b`` (:func:`padding_mask`) and, when ``causal``, ``j <= i`` in
    the order the tokens are laid out (pads included, as with left padding).
    Pad *query* rows see all the real keys of their sequence, as Hugging Face
    models let them, so no row but those of an empty sequence is fully masked;
    their outputs are meaningless and ignored. Add a head axis with ``[:, None]``
    to pass it to the attention functions.
    """
    keys = padding_mask(lengths, max_len, side, device)[:, 0]  # (batch, 1, T)
    batch, _, T = keys.shape
    if not causal:
        return keys.expand(batch, T, T).clone()  # (batch, T, T)
    real_query = keys.transpose(-2, -1)  # (batch, T, 1)
    return keys & (causal_mask(T, device=keys.device) | ~real_query)  # (batch, T, T)


def pad_row(row: list, length: int, pad, side: str = "right") -> list:
    """A list padded with ``pad`` to ``length`` on ``side`` (the layout ``padding_mask`` describes)."""
    fill = [pad] * (length - len(row))
    return row + fill if side == "right" else fill + row


def positions_from_mask(key_mask: Tensor) -> Tensor:
    """Position of each token counting real tokens only: (batch, T) -> (batch, T).

    Left padding then does not shift the positions of the real tokens (pads get 0).
    """
    return (key_mask.long().cumsum(-1) - 1).clamp_min(0)


def check_mask(mask: Tensor | None, shape: Sequence[int] | None = None, like: Tensor | None = None) -> Tensor | None:
    """``mask`` checked against the conventions every attention path shares; None passes.

    This is the one rule both attention paths (the inspectable and the fused one) apply, so they accept and reject
    the same masks. TypeError unless it is bool (True = may attend) or floating point (added to the scores): an
    integer 0/1 mask is ambiguous, being neither. With ``shape`` (batch, n_head, q_len, k_len), ValueError unless
    the mask has 1 to 4 dims and broadcasts to it. A 1-D mask of length k_len is a key mask, the same for every
    query; it comes back as (1, k_len), a shape torch's fused kernel accepts too.

    With ``like`` (the queries) the mask comes back on their device, and a float mask in their dtype, since torch's
    fused kernel refuses a float mask of another dtype (float64 with float32 queries) that the inspectable path
    would add. A cell at or below the finfo min of the mask's own dtype (how Hugging Face hides a key) becomes
    ``-inf`` before the cast, so it still hides the key once the dtype is wider (a float16 ``-65504`` in float32
    scores) and a row of them is still found fully masked. A bool mask stays bool.
    """
    if mask is None:
        return None
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        raise TypeError(
            f"mask has dtype {mask.dtype}: use a bool keep-mask (True = may attend) or an additive float mask "
            "(0 to keep, -inf to drop); for a 0/1 integer mask, pass mask.bool()"
        )
    if shape is not None:
        shape = tuple(shape)
        fits = 1 <= mask.ndim <= len(shape)
        if fits:
            try:
                fits = torch.broadcast_shapes(mask.shape, shape) == shape
            except RuntimeError:
                fits = False
        if not fits:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not broadcast to (batch, n_head, q_len, k_len) = {shape}"
            )
        if mask.ndim == 1:
            mask = mask[None, :]  # (1, k_len)
    if like is not None:
        mask = mask.to(device=like.device)
        if mask.dtype != torch.bool and mask.dtype != like.dtype:
            hidden = mask <= torch.finfo(mask.dtype).min  # -inf included
            mask = mask.masked_fill(hidden, float("-inf")).to(like.dtype)
    return mask


def masked_cells(mask: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """Where ``mask`` hides a key: bool, same shape as ``mask``.

    A bool mask hides where it is False. A float mask hides where it is ``-inf``
    or at most the most negative finite value (``torch.finfo(...).min``), which
    is how Hugging Face builds additive masks: exp gives such a cell no weight,
    but a row of them alone would get a uniform softmax instead of none. The
    line is the finfo min of the mask's dtype or of ``dtype`` (the scores'),
    whichever is nearer zero, so a mask built in float16 still counts once cast
    to float32 to meet float16 scores.
    """
    if mask.dtype == torch.bool:
        return ~mask
    line = torch.finfo(mask.dtype).min
    if dtype is not None and dtype.is_floating_point:
        line = max(line, torch.finfo(dtype).min)
    return mask <= line


def visible_keys(mask: Tensor | None, q_len: int, k_len: int) -> Tensor:
    """How many keys each query may attend to, broadcast to (..., q_len)."""
    if mask is None:
        return torch.full((q_len,), k_len)
    mask = ~masked_cells(mask)
    mask = mask.expand(*mask.shape[:-2], q_len, k_len)
    return mask.sum(dim=-1)  # (..., q_len)


def key_block(lo: Tensor, hi: Tensor, c0: int, c1: int) -> Tensor:
    """The dense mask of rows whose keys run lo..hi-1, (R,) each, over keys c0..c1-1: bool (R, c1 - c0) on lo's device."""
    keys = torch.arange(c0, c1, device=lo.device)[None, :]  # (1, c1 - c0)
    return (keys >= lo[:, None]) & (keys < hi[:, None])


@dataclass(frozen=True, eq=False)
class KeyRanges:
    """The mask a layer really applied, in O(q_len) memory: query ``i`` may attend to keys ``lo[i] .. hi[i] - 1``.

    One contiguous run of keys per query covers every mask a real model applies
    to one sequence: none (all keys), causal, a sliding window, left or right
    padding with or without causality, a bidirectional prefix (prefix-LM) and
    packed documents. A row with ``lo >= hi`` sees nothing (a fully masked row).
    Storing two integers per query instead of a (q_len, k_len) matrix is what
    lets an 8,192-token capture keep every layer's mask.

    lo, hi: (q_len,) int64; k_len: the number of keys.
    """

    lo: Tensor
    hi: Tensor
    k_len: int

    def __post_init__(self) -> None:
        if self.lo.shape != self.hi.shape or self.lo.ndim != 1:
            raise ValueError(f"lo {tuple(self.lo.shape)} and hi {tuple(self.hi.shape)} must be equal 1-D shapes")

    @classmethod
    def full(cls, q_len: int, k_len: int | None = None) -> KeyRanges:
        """Every query sees every key (an encoder without padding)."""
        k_len = q_len if k_len is None else k_len
        return cls(torch.zeros(q_len, dtype=torch.long), torch.full((q_len,), k_len, dtype=torch.long), k_len)

    @classmethod
    def span(cls, q_len: int, start: int, end: int, k_len: int | None = None) -> KeyRanges:
        """Every query sees keys ``start .. end - 1`` (an encoder row padded outside that span)."""
        k_len = q_len if k_len is None else k_len
        return cls(torch.full((q_len,), start, dtype=torch.long), torch.full((q_len,), end, dtype=torch.long), k_len)

    @classmethod
    def causal(
        cls, q_len: int, k_len: int | None = None, window: int | None = None, start: int = 0, end: int | None = None
    ) -> KeyRanges:
        """Causal (bottom-right aligned, as :func:`causal_mask`), optionally within a sliding ``window``.

        ``start``/``end`` restrict the keys to the real tokens ``start .. end - 1`` of a padded row.
        """
        k_len = q_len if k_len is None else k_len
        offset = _offset(q_len, k_len, None)
        q_pos = torch.arange(q_len) + offset  # (q_len,)
        lo = torch.full((q_len,), start, dtype=torch.long)
        if window is not None:
            if window < 1:
                raise ValueError(f"window ({window}) must be >= 1")
            lo = torch.maximum(lo, q_pos - window + 1)
        hi = torch.clamp(q_pos + 1, max=k_len if end is None else end)
        return cls(lo, hi, k_len)

    @classmethod
    def prefix_lm(cls, q_len: int, prefix: int) -> KeyRanges:
        """:func:`prefix_lm_mask`: query ``i`` sees keys ``0 .. max(prefix, i + 1) - 1`` (at most q_len)."""
        q_len, prefix = _size("q_len", q_len), _size("prefix", prefix)
        if q_len < 0 or prefix < 0:
            raise ValueError(f"q_len ({q_len}) and prefix ({prefix}) must be non-negative")
        hi = torch.clamp(torch.arange(1, q_len + 1), min=min(prefix, q_len))  # (q_len,)
        return cls(torch.zeros(q_len, dtype=torch.long), hi, q_len)

    @classmethod
    def documents(cls, lengths: Sequence[int] | Tensor, causal: bool = True) -> KeyRanges:
        """:func:`document_mask`: each position sees its own document, up to itself when ``causal``."""
        lengths, _ = _lengths(lengths)  # (n_doc,) on the host
        if bool((lengths == 0).any()):
            raise ValueError(f"lengths {lengths.tolist()} must be positive: a document has at least one token")
        ends = lengths.cumsum(0)  # (n_doc,)
        lo = torch.repeat_interleave(ends - lengths, lengths)  # (T,) first position of each one's document
        T = int(ends[-1]) if lengths.numel() else 0
        hi = torch.arange(1, T + 1) if causal else torch.repeat_interleave(ends, lengths)  # (T,)
        return cls(lo, hi, T)

    @classmethod
    def from_mask(cls, mask: Tensor, rows_at_once: int = 256) -> KeyRanges:
        """Read a bool (q_len, k_len) "may attend" mask; ValueError if a row's keys are not one run.

        Read ``rows_at_once`` rows at a time, so an 8,192-token mask costs a few MB
        of scratch on its device, not copies of the whole matrix; what is read comes
        back to the host once, three integers a row, with no wait for the device per chunk.
        """
        if mask.dtype != torch.bool or mask.ndim != 2:
            raise ValueError(f"expected a bool (q_len, k_len) mask, got {mask.dtype} {tuple(mask.shape)}")
        q_len, k_len = mask.shape
        if q_len == 0:
            return cls.full(0, k_len)
        keys = torch.arange(k_len, device=mask.device)[None, :]  # (1, k_len)
        parts = []
        for r0 in range(0, q_len, rows_at_once):
            rows = mask[r0 : r0 + rows_at_once]  # (R, k_len)
            count = rows.sum(dim=-1)  # (R,)
            lo = torch.where(count > 0, rows.to(torch.uint8).argmax(dim=-1), 0)  # the first key seen
            hi = lo + count
            run = (keys >= lo[:, None]) & (keys < hi[:, None])  # (R, k_len): one run of count keys from lo
            parts.append(torch.stack([lo, hi, (run != rows).any(dim=-1).long()]))  # (3, R): lo, hi, not one run
        lo, hi, bad = torch.cat(parts, dim=1).cpu()  # (q_len,) each: the one read back
        if bool(bad.any()):
            raise ValueError(f"row {int(bad.nonzero()[0, 0])} of the mask is not one contiguous run of keys")
        return cls(lo.clone(), hi.clone(), k_len)  # not views into the three rows read back

    @property
    def q_len(self) -> int:
        return self.lo.shape[0]

    def visible(self) -> Tensor:
        """How many keys each query sees: (q_len,)."""
        return (self.hi - self.lo).clamp_min(0)

    def block(
        self, r0: int, r1: int, c0: int = 0, c1: int | None = None, device: torch.device | str | None = None
    ) -> Tensor:
        """The dense mask of rows r0..r1-1 and keys c0..c1-1: bool (r1 - r0, c1 - c0), built on ``device``.

        Only the rows' two integers travel to ``device``, never the (r1 - r0, c1 - c0) mask.
        """
        c1 = self.k_len if c1 is None else c1
        lo, hi = self.lo[r0:r1], self.hi[r0:r1]
        if device is not None:
            lo, hi = lo.to(device), hi.to(device)
        return key_block(lo, hi, c0, c1)

    def dense(self) -> Tensor:
        """The whole mask, bool (q_len, k_len): only for small inputs."""
        return self.block(0, self.q_len)

    def key_span(self, r0: int, r1: int) -> tuple[int, int]:
        """The keys any of rows r0..r1-1 may see, as one range (c0, c1); (0, 0) when none."""
        live = self.hi[r0:r1] > self.lo[r0:r1]
        if not bool(live.any()):
            return 0, 0
        return int(self.lo[r0:r1][live].min()), int(self.hi[r0:r1][live].max())

    def is_causal(self) -> bool:
        """No query sees a key after its own position (bottom-right aligned)."""
        q_pos = torch.arange(self.q_len) + (self.k_len - self.q_len)
        live = self.hi > self.lo
        return bool((self.hi[live] <= q_pos[live] + 1).all())

    def equals(self, other: KeyRanges) -> bool:
        """The same mask (empty rows compare equal whatever their lo)."""
        if self.k_len != other.k_len or self.q_len != other.q_len:
            return False
        a, b = self.visible() > 0, other.visible() > 0
        return bool(torch.equal(a, b) and torch.equal(self.lo[a], other.lo[a]) and torch.equal(self.hi[a], other.hi[a]))

    def describe(self) -> Message:
        """A short name for what this mask is: "no mask", "causal", "sliding window of 4", "custom"."""
        n = self.q_len
        if n == 0:
            return msg("mask_build.no_mask")
        if self.equals(KeyRanges.full(n, self.k_len)):
            return msg("mask_build.every_key")
        if self.equals(KeyRanges.causal(n, self.k_len)):
            return msg("mask_build.causal")
        window = int(self.visible().max())
        if window < self.k_len and self.equals(KeyRanges.causal(n, self.k_len, window=window)):
            return msg("mask_build.sliding", window=window)
        return msg("mask_build.causal_custom") if self.is_causal() else msg("mask_build.custom")

"""The Mask lab's masks: the kinds a user builds for one text of T tokens, and a user's own mask.

A :class:`LabMask` carries a mask three ways: as the attention receives it
(``acting``: bool keep or additive float), as its author holds it (``raw``,
read with ``convention``; what the doctor reads), and as the cells it keeps
(``keep``). Padding on one text treats its last (or first) tokens as the pads
of a sequence shorter than the batch's longest. A decode step (or a chunk of
prefill) over a KV cache is the last ``q_len`` tokens of the text: its ``raw``
mask is (q_len, T), what the doctor checks; it acts on the whole text with the
cached rows above it causal, as they were computed before the step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.core.masks import batch_padding_keep, causal_mask, document_mask, prefix_lm_mask, sliding_window_mask
from attnviz.i18n.message import Message, PluralS, msg
from attnviz.labs.masks.effects import blocked_by

# the kinds a user picks from; their names are in the catalogues ([mask_lab.kind])
KINDS = ("causal", "padding", "causal+padding", "sliding", "prefix", "document", "decode", "custom")
# how a decode step's mask places its queries: the right offset (k_len - q_len), off by one either way, or top-left
ALIGNS = ("right", "plus_one", "minus_one", "top_left")


def kind_label(kind: str) -> Message:
    """A kind's name, to show (the option value stays the key of :data:`KINDS`)."""
    if kind == "decode":
        return msg("mask_decode_lab.kind_decode")
    return msg(f"mask_lab.kind.{kind}")


@dataclass(frozen=True, eq=False)
class LabMask:
    """One mask on a text of T tokens; see the module docstring. expect: the doctor's name for what it is (None: no
    such name); q_len: a decode step's query rows (raw is (q_len, T)), None for a (T, T) mask; offset: the
    offset a built decode step was given (its first row keeps keys 0 .. offset), None otherwise; custom: the
    user's own mask, which says nothing of what it is meant to be."""

    acting: Tensor
    raw: Tensor
    convention: str
    expect: str | None = None
    lengths: list[int] | None = None
    side: str = "right"
    q_len: int | None = None
    offset: int | None = None
    custom: bool = False

    @property
    def keep(self) -> Tensor:
        """bool (T, T): the cells the attention may attend to under this mask."""
        return ~blocked_by(self.acting)

    def full_cells(self, cells: Tensor) -> Tensor:
        """bool cells of ``raw``'s shape, (q_len, T), placed in the text's (T, T): the step's rows are the last."""
        T = self.acting.shape[-1]
        if tuple(cells.shape) == (T, T):
            return cells
        full = torch.zeros(T, T, dtype=torch.bool)
        full[T - cells.shape[0] :] = cells
        return full


def _built(keep: Tensor, expect: str | None, lengths: list[int] | None = None, side: str = "right") -> LabMask:
    return LabMask(acting=keep, raw=keep, convention="keep", expect=expect, lengths=lengths, side=side)


def built_mask(
    kind: str,
    n_tokens: int,
    *,
    causal: bool = True,
    pads: int = 0,
    side: str = "right",
    window: int = 4,
    prefix: int = 4,
    documents: Sequence[int] | None = None,
    q_len: int = 1,
    align: str = "right",
) -> LabMask:
    """A mask of ``kind`` (a key of :data:`KINDS` but "custom") for ``n_tokens`` tokens.

    pads: how many of the tokens stand for padding, on ``side``; documents: the
    lengths of the packed documents (they must sum to n_tokens); ``causal``
    makes the documents causal inside (the doctor then expects ``documents:…``, else
    ``bidirectional-documents:…``).
    q_len and align: a decode step's queries (the last q_len tokens) and how its
    mask places them (:data:`ALIGNS`: "right" is correct, the others are bugs).
    """
    T = n_tokens
    if kind in ("padding", "causal+padding"):
        if not 0 <= pads < T:
            raise ValueError(msg("mask_lab.pads", pads=pads, T=T))
        keep = batch_padding_keep([T - pads], T, side, causal=kind == "causal+padding")[0]  # (T, T)
        return _built(keep, kind, [T - pads], side)
    if kind == "causal":
        return _built(causal_mask(T), "causal")
    if kind == "sliding":
        return _built(sliding_window_mask(T, window), f"sliding:{window}")
    if kind == "prefix":
        return _built(prefix_lm_mask(T, prefix), f"prefix:{prefix}")
    if kind == "document":
        documents = list(documents or [])
        if sum(documents) != T:
            raise ValueError(msg("mask_lab.documents", documents=documents, total=sum(documents), T=T))
        expect = ("" if causal else "bidirectional-") + "documents:" + ",".join(map(str, documents))
        return _built(document_mask(documents, causal=causal), expect)
    if kind == "decode":
        return decode_mask(T, q_len, align)
    raise ValueError(f"unknown mask kind {kind!r}; use one of {', '.join(k for k in KINDS if k != 'custom')}")


def decode_mask(n_tokens: int, q_len: int, align: str = "right") -> LabMask:
    """A decode step of ``q_len`` queries, the last of ``n_tokens``, over a KV cache of the tokens before them.

    raw: (q_len, T), ``causal_mask(q_len, T, offset=o)`` with o the cache's size (``align="right"``), one more
    or one less (the off-by-one bugs) or 0 (top-left, as SDPA's ``is_causal`` aligns a rectangle).
    """
    T = n_tokens
    if not 1 <= q_len < T:
        raise ValueError(msg("mask_decode_lab.q_len_range", q_len=q_len, most=T - 1, T=T))
    if align not in ALIGNS:
        raise ValueError(msg("mask_decode_lab.align_unknown", align=align))
    cached = T - q_len
    offset = {"right": cached, "plus_one": cached + 1, "minus_one": cached - 1, "top_left": 0}[align]
    raw = causal_mask(q_len, T, offset=offset)  # (q_len, T)
    return LabMask(acting=with_cache(raw), raw=raw, convention="keep", expect="causal", q_len=q_len, offset=offset)


def decode_note(lab: LabMask) -> Message | None:
    """Why a decode step built with too large an offset leaks less than it seems, or None.

    Its last row would keep the keys up to offset + q_len - 1, past the text's last key (T - 1): that key does not
    exist, so the row keeps what the right mask keeps. With one query nothing leaks at this step at all, though
    the same mask leaks wherever a later key exists: in a chunk of two or more queries, or a preallocated cache.
    """
    if lab.q_len is None or lab.offset is None:
        return None
    T = lab.acting.shape[-1]
    right = T - lab.q_len
    past = lab.offset + lab.q_len - T  # keys past the text's last that the last row would keep
    if past < 1:
        return None
    fields = {"offset": lab.offset, "right": right, "last": T - 1, "beyond": T - 1 + past, "q_len": lab.q_len}
    if lab.q_len == 1:
        hint = msg("mask_verdict.raise_queries") if T > 2 else ""  # two tokens: one query is all a step can have
        return msg("mask_verdict.decode_past_end_one", s_right=PluralS(right), hint=hint, **fields)
    return msg("mask_verdict.decode_past_end", leaking=lab.q_len - past, s=PluralS(lab.q_len - past), **fields)


def with_cache(rows: Tensor) -> Tensor:
    """A step's mask (q_len, T) as it acts on the whole text, (T, T): the cached rows above it causal.

    ``rows`` acts as given (bool keep, or additive float in its dtype); the cached rows are built the same way.
    """
    q_len, T = rows.shape
    cached = causal_mask(T)[: T - q_len]  # (T - q_len, T)
    if rows.dtype != torch.bool:
        cached = torch.zeros(cached.shape).masked_fill(~cached, float("-inf")).to(rows.dtype)
    return torch.cat([cached, rows])  # (T, T)


def custom_mask(raw: Tensor, convention: str) -> LabMask:
    """A user's own mask, (T, T) or a decode step's (q_len, T): bool read with ``convention`` ("keep" or
    "block"), a float mask is additive."""
    if raw.dtype == torch.bool:
        if convention not in ("keep", "block"):
            raise ValueError(f"a bool mask is read as keep or block, not {convention!r}")
        acting, convention_read = (raw if convention == "keep" else ~raw), convention
    elif raw.is_floating_point():
        acting, convention_read = raw, "additive"
    else:
        raise TypeError(f"a mask must be bool or an additive float, not {raw.dtype}")
    q_len, T = raw.shape
    if q_len == T:
        return LabMask(acting=acting, raw=raw, convention=convention_read, custom=True)
    if not 1 <= q_len < T:
        raise ValueError(msg("mask_decode_lab.rows_shape", q_len=q_len, T=T, shape=tuple(raw.shape)))
    return LabMask(acting=with_cache(acting), raw=raw, convention=convention_read, q_len=q_len, custom=True)

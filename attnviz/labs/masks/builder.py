"""The Mask lab's masks: the kinds a user builds for one text of T tokens, and a user's own mask.

A :class:`LabMask` carries a mask three ways: as the attention receives it
(``acting``: bool keep or additive float), as its author holds it (``raw``,
read with ``convention``; what the doctor reads), and as the cells it keeps
(``keep``). Padding on one text treats its last (or first) tokens as the pads
of a sequence shorter than the batch's longest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.core.masks import batch_padding_keep, causal_mask, document_mask, prefix_lm_mask, sliding_window_mask
from attnviz.i18n.message import Message, msg
from attnviz.labs.masks.effects import blocked_by

# the kinds a user picks from; their names are in the catalogues ([mask_lab.kind])
KINDS = ("causal", "padding", "causal+padding", "sliding", "prefix", "document", "custom")


def kind_label(kind: str) -> Message:
    """A kind's name, to show (the option value stays the key of :data:`KINDS`)."""
    return msg(f"mask_lab.kind.{kind}")


@dataclass(frozen=True, eq=False)
class LabMask:
    """One (T, T) mask; see the module docstring. expect: the doctor's name for what it is (None: no such name)."""

    acting: Tensor
    raw: Tensor
    convention: str
    expect: str | None = None
    lengths: list[int] | None = None
    side: str = "right"

    @property
    def keep(self) -> Tensor:
        """bool (T, T): the cells the attention may attend to under this mask."""
        return ~blocked_by(self.acting)


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
) -> LabMask:
    """A mask of ``kind`` (a key of :data:`KINDS` but "custom") for ``n_tokens`` tokens.

    pads: how many of the tokens stand for padding, on ``side``; documents: the
    lengths of the packed documents (they must sum to n_tokens); ``causal``
    makes the documents causal inside.
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
        return _built(document_mask(documents, causal=causal), None)
    raise ValueError(f"unknown mask kind {kind!r}; use one of {', '.join(k for k in KINDS if k != 'custom')}")


def custom_mask(raw: Tensor, convention: str) -> LabMask:
    """A user's own (T, T) mask: bool read with ``convention`` ("keep" or "block"), a float mask is additive."""
    if raw.dtype == torch.bool:
        if convention not in ("keep", "block"):
            raise ValueError(f"a bool mask is read as keep or block, not {convention!r}")
        return LabMask(acting=raw if convention == "keep" else ~raw, raw=raw, convention=convention)
    if not raw.is_floating_point():
        raise TypeError(f"a mask must be bool or an additive float, not {raw.dtype}")
    return LabMask(acting=raw, raw=raw, convention="additive")

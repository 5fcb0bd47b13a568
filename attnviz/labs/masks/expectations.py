"""What a mask should be: the mask doctor's expectations, parsed from ``--expect`` and built as keep masks.

An :class:`Expectation` names a rule (causal, padding, causal + padding, a
sliding window, a prefix-LM, or packed documents: block-diagonal, causal or, for an encoder, bidirectional) and
:func:`expected_keep` builds it for a mask's geometry: ``q_len`` queries over
``k_len`` keys, the queries at absolute positions ``offset .. offset + q_len - 1``
(a KV cache holding ``offset`` tokens: bottom-right aligned by default,
``offset = k_len - q_len``), one sequence or a padded batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.core.masks import padding_mask
from attnviz.core.typed_numbers import whole_number
from attnviz.i18n.message import Text, msg

EXPECT_KINDS = ("causal", "padding", "causal+padding", "sliding", "prefix", "documents")
BIDIRECTIONAL = "bidirectional-"  # before "documents:": packed documents that see each other's keys both ways
SIDES = ("right", "left")


@dataclass(frozen=True)
class Expectation:
    """What the mask should be: kind in :data:`EXPECT_KINDS`; ``window`` for sliding, ``prefix`` for prefix,
    ``documents`` (the packed documents' lengths, in order) for documents, which are causal inside unless
    ``bidirectional`` (an encoder's packed documents: "bidirectional-documents:L1,L2,…")."""

    kind: str
    window: int | None = None
    prefix: int | None = None
    documents: tuple[int, ...] | None = None
    bidirectional: bool = False

    def __post_init__(self) -> None:
        if self.kind not in EXPECT_KINDS:
            raise ValueError(msg("mask_doctor.expect_kind", kinds=", ".join(EXPECT_KINDS), kind=repr(self.kind)))
        if (self.window is not None) != (self.kind == "sliding"):
            raise ValueError(msg("mask_doctor.window_with_sliding"))
        if (self.prefix is not None) != (self.kind == "prefix"):
            raise ValueError(msg("mask_doctor.prefix_with_prefix"))
        if (self.documents is not None) != (self.kind == "documents"):
            raise ValueError(msg("mask_decode.documents_with_documents"))
        if self.bidirectional and self.kind != "documents":
            raise ValueError(msg("mask_decode.documents_with_documents"))
        if self.window is not None and self.window < 1:
            raise ValueError(msg("mask_doctor.window_positive", window=self.window))
        if self.prefix is not None and self.prefix < 0:
            raise ValueError(msg("mask_doctor.prefix_positive", prefix=self.prefix))
        if self.documents is not None:
            if not self.documents or any(isinstance(n, bool) or int(n) != n or n < 1 for n in self.documents):
                raise ValueError(msg("mask_decode.documents_positive", documents=list(self.documents)))
            object.__setattr__(self, "documents", tuple(int(n) for n in self.documents))

    @property
    def causal(self) -> bool:
        """Whether keys after the query are blocked (outside a prefix-LM's prefix)."""
        return self.kind != "padding" and not self.bidirectional

    @property
    def needs_lengths(self) -> bool:
        return self.kind in ("padding", "causal+padding")

    def describe(self) -> Text:
        """A name for messages: "causal", "sliding-window (4)", "prefix-LM (prefix 3)", "packed-documents (5, 3)"."""
        if self.kind == "sliding":
            return msg("mask_doctor.describe_sliding", window=self.window)
        if self.kind == "prefix":
            return msg("mask_doctor.describe_prefix", prefix=self.prefix)
        if self.kind == "documents":
            key = "mask_decode.describe_bidirectional" if self.bidirectional else "mask_decode.describe_documents"
            return msg(key, documents=", ".join(map(str, self.documents)))
        return msg(f"mask_doctor.describe_{self.kind.replace('+', '_')}")

    def __str__(self) -> str:
        if self.kind == "sliding":
            return f"sliding:{self.window}"
        if self.kind == "prefix":
            return f"prefix:{self.prefix}"
        if self.kind == "documents":
            return f"{BIDIRECTIONAL * self.bidirectional}documents:" + ",".join(map(str, self.documents))
        return self.kind


def parse_lengths(text: str, what: str = "--lengths") -> list[int]:
    """``"5,3"`` as [5, 3]: each sequence's (or document's) length, at least 1, in ASCII digits; ValueError
    naming ``what``."""
    lengths = [whole_number(part) for part in str(text).split(",")]
    if None in lengths:
        raise ValueError(msg("mask_doctor.lengths_numbers", what=what, text=repr(text)))
    if any(n < 1 for n in lengths):
        raise ValueError(msg("mask_doctor.lengths_positive", what=what, text=repr(text)))
    return lengths


def parse_expect(text: str) -> Expectation:
    """``causal``, ``padding``, ``causal+padding``, ``sliding:W``, ``prefix:P``, ``documents:L1,L2,…`` or
    ``bidirectional-documents:L1,L2,…`` as an Expectation; ValueError else."""
    kind, _, number = str(text).strip().lower().partition(":")
    kind = {"padding+causal": "causal+padding", "document": "documents"}.get(kind, kind)
    bidirectional = kind in (f"{BIDIRECTIONAL}documents", f"{BIDIRECTIONAL}document")
    if kind == "documents" or bidirectional:
        what = f"--expect {BIDIRECTIONAL * bidirectional}documents:"
        return Expectation("documents", documents=tuple(parse_lengths(number, what)), bidirectional=bidirectional)
    if kind in ("sliding", "prefix"):
        value = whole_number(number)
        if value is None:
            raise ValueError(msg("mask_doctor.expect_number", text=repr(text), kind=kind))
        return Expectation(kind, window=value) if kind == "sliding" else Expectation(kind, prefix=value)
    if kind not in EXPECT_KINDS or number:
        raise ValueError(msg("mask_doctor.expect_unknown", text=repr(text), usage=msg("mask_decode.usage")))
    return Expectation(kind)


def real_tokens(lengths: list[int] | None, batch: int, seq_len: int, side: str) -> Tensor:
    """True on real (non-pad) positions: (batch, seq_len)."""
    if lengths is None:
        return torch.ones(batch, seq_len, dtype=torch.bool)
    return padding_mask(lengths, seq_len, side=side)[:, 0, 0]  # (batch, seq_len)


def document_index(documents: tuple[int, ...] | list[int]) -> Tensor:
    """The document of every position of a packed sequence: (sum(documents),), int64, 0 for the first."""
    lengths = torch.tensor(list(documents))
    return torch.repeat_interleave(torch.arange(len(documents)), lengths)  # (T,)


def query_positions(q_len: int, offset: int) -> Tensor:
    """The absolute position of every query row: (q_len,), ``offset + i`` (a KV cache holding ``offset`` tokens)."""
    return torch.arange(q_len) + offset


def self_cells(q_len: int, k_len: int, offset: int) -> Tensor:
    """bool (q_len, k_len), True where the key is the query itself: key ``offset + i`` for row ``i``."""
    return torch.arange(k_len)[None, :] == query_positions(q_len, offset)[:, None]


def future_cells(q_len: int, k_len: int, offset: int) -> Tensor:
    """bool (q_len, k_len), True where the key comes after the query: key > ``offset + i``."""
    return torch.arange(k_len)[None, :] > query_positions(q_len, offset)[:, None]


def expected_keep(
    expect: Expectation,
    seq_len: int,
    *,
    batch: int | None = None,
    lengths: list[int] | None = None,
    side: str = "right",
    q_len: int | None = None,
    offset: int | None = None,
) -> Tensor:
    """The keep mask (True = may attend) the expectation describes: (q_len, T), or (B, q_len, T) with batch or
    lengths.

    T is ``seq_len``, the (padded) number of keys; ``q_len`` defaults to T and the queries sit at absolute
    positions ``offset + i``, ``offset`` defaulting to ``T - q_len`` (bottom-right, as with a KV cache).

    Each sequence's rule applies to its own positions (a left-padded sequence's
    prefix and window start at its first real token) and no query keeps a pad
    key. A padding query row keeps what the rule gives it among the real keys,
    or only itself when that is nothing, so no row is ever fully masked.
    Packed documents (``documents``) keep only the keys of the query's own document, causally (both ways when
    ``bidirectional``).
    """
    if side not in SIDES:
        raise ValueError(msg("mask_doctor.side", side=repr(side)))
    n_seq = len(lengths) if lengths is not None else (batch or 1)
    if batch is not None and batch != n_seq:
        raise ValueError(f"batch ({batch}) and the number of lengths ({n_seq}) differ")
    T = seq_len
    Q = T if q_len is None else q_len
    offset = T - Q if offset is None else offset
    if offset < 0 or offset + Q > T:
        raise ValueError(msg("mask_decode.offset_range", q_len=Q, offset=offset, k_len=T))
    real = real_tokens(lengths, n_seq, T, side)  # (B, T)
    first = torch.tensor([T - n for n in lengths] if lengths is not None and side == "left" else [0] * n_seq)  # (B,)
    pos = torch.arange(T)[None, :] - first[:, None]  # (B, T): position within the sequence
    q, k = pos[:, offset : offset + Q, None], pos[:, None, :]  # (B, Q, 1), (B, 1, T)
    rule = torch.ones(n_seq, Q, T, dtype=torch.bool) if not expect.causal else k <= q  # (B, Q, T)
    if expect.kind == "sliding":
        rule = rule & (q - k < expect.window)
    if expect.kind == "prefix":
        rule = rule | ((q < expect.prefix) & (k < expect.prefix))
    if expect.kind == "documents":
        if sum(expect.documents) != T:
            raise ValueError(msg("mask_decode.documents_total", total=sum(expect.documents), T=T))
        doc = document_index(expect.documents)  # (T,)
        rule = rule & (doc[offset : offset + Q, None] == doc[None, :])  # (B, Q, T)
    keep = rule & real[:, None, :]  # (B, Q, T)
    keep = keep | (~keep.any(dim=-1, keepdim=True) & self_cells(Q, T, offset))
    return keep[0] if batch is None and lengths is None else keep

"""A gallery of mask bugs, each beside the mask it should have been, for a text of T tokens.

Every entry holds both masks *as they act* (what the attention receives: bool
keep or an additive float in its dtype) and the buggy mask as its author holds
it, with the convention they would tell the mask doctor, so the doctor, the
plots and the leak test all see the same bug. Padding bugs treat the text's
last (or first) tokens as pads of a one-sequence batch. The KV-cache bug is a
chunk of prefill: the doctor reads its (q_len, T) rows, bottom-right aligned;
the packed-documents bug splits the text into two documents.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from attnviz.core.masks import batch_padding_keep, causal_mask, document_mask
from attnviz.i18n.message import Message, msg
from attnviz.labs.masks.doctor import Diagnosis, diagnose, parse_expect
from attnviz.labs.masks.effects import blocked_by, head_effect
from attnviz.models.record import AttentionRecord

# how many of the text's tokens the padding bugs treat as pads
PAD_SHARE = 4


@dataclass(frozen=True, eq=False)
class GalleryBug:
    """One mask bug.

    correct / buggy: (T, T) masks as the attention receives them; raw: the buggy
    mask as its author holds it, read by the doctor with ``convention``;
    expect: the mask doctor's ``--expect``; lengths, side: the padding, if any;
    q_len: a chunk's query rows when raw is (q_len, T), the last of the text;
    intended: bool (T, T), the cells the correct mask keeps; kinds: what the
    doctor reports for it.
    """

    key: str
    title: Message
    what: Message
    fix: Message
    correct: Tensor
    buggy: Tensor
    raw: Tensor
    convention: str
    kinds: tuple[str, ...]
    expect: str = "causal"
    lengths: list[int] | None = None
    side: str = "right"
    q_len: int | None = None

    @property
    def intended(self) -> Tensor:
        return ~blocked_by(self.correct)


def _causal(n_tokens: int) -> Tensor:
    return torch.ones(n_tokens, n_tokens, dtype=torch.bool).tril()  # (T, T): query i sees keys 0..i


def _real(n_tokens: int, n_pad: int, side: str) -> Tensor:
    """(T,) True at the real tokens of a sequence whose ``n_pad`` pads sit on ``side``."""
    real = torch.ones(n_tokens, dtype=torch.bool)
    if n_pad:
        if side == "right":
            real[n_tokens - n_pad :] = False
        else:
            real[:n_pad] = False
    return real


def _additive(keep: Tensor, fill: float, dtype: torch.dtype) -> Tensor:
    """A keep mask as an additive float: 0 where kept, ``fill`` elsewhere, built in float32 and cast to ``dtype``
    as a model in half precision casts it (float16 rounds -1e9 to -inf)."""
    return torch.zeros(keep.shape).masked_fill(~keep, fill).to(dtype)


def gallery(n_tokens: int, causal: bool) -> list[GalleryBug]:
    """The bugs for a text of T = n_tokens >= 2 tokens, for a decoder (``causal``) or an encoder."""
    T = n_tokens
    if T < 2:
        raise ValueError(f"the gallery needs a text of at least 2 tokens, not {T}")
    n_pad = max(1, T // PAD_SHARE)
    lengths = [T - n_pad]
    base = _causal(T) if causal else torch.ones(T, T, dtype=torch.bool)
    pad_expect = "causal+padding" if causal else "padding"
    # a decoder pads on the left (right pads come after every real query, which a causal mask hides anyway)
    pad_side = "left" if causal else "right"
    side = msg(f"mask_gallery.side_{pad_side}")  # "left" in "leftmost"
    real = _real(T, n_pad, pad_side)
    keys_real = batch_padding_keep(lengths, T, pad_side, causal=causal)[0]  # (T, T): pads hidden as keys
    rows_real = base & real[:, None]  # (T, T): the bug: pads hidden as queries
    left_real = _real(T, n_pad, "left")
    left_keep = _causal(T) & left_real[None, :]  # causal + left padding: the pad rows see nothing
    left_fixed = batch_padding_keep(lengths, T, "left", causal=True)[0]  # pad rows see the real tokens
    chunked = torch.ones(T, T, dtype=torch.bool).tril(1)  # every chunk's query i also sees key i + 1
    chunk = min(T, max(2, T // 2))  # the last chunk's queries: at least 2, or an off-by-one offset shows nothing
    start = T - chunk  # the tokens already in the cache
    chunk_raw = causal_mask(chunk, T, offset=start + 1)  # (chunk, T): the offset one too large; == chunked[start:]
    documents = [T // 2, T - T // 2]
    upper = torch.ones(T, T, dtype=torch.bool).triu()
    no_self = torch.ones(T, T, dtype=torch.bool).tril(-1)
    return [
        GalleryBug(
            key="inverted",
            title=msg("mask_gallery.inverted.title"),
            what=msg("mask_gallery.inverted.what"),
            fix=msg("mask_gallery.inverted.fix"),
            correct=_causal(T),
            buggy=~_causal(T),
            raw=_causal(T),
            convention="block",
            kinds=("inverted",),
        ),
        GalleryBug(
            key="upper_triangle",
            title=msg("mask_gallery.upper_triangle.title"),
            what=msg("mask_gallery.upper_triangle.what"),
            fix=msg("mask_gallery.upper_triangle.fix"),
            correct=_causal(T),
            buggy=upper,
            raw=upper,
            convention="keep",
            kinds=("future_leak", "over_masked"),
        ),
        GalleryBug(
            key="no_diagonal",
            title=msg("mask_gallery.no_diagonal.title"),
            what=msg("mask_gallery.no_diagonal.what"),
            fix=msg("mask_gallery.no_diagonal.fix"),
            correct=_causal(T),
            buggy=no_self,
            raw=no_self,
            convention="keep",
            kinds=("fully_masked_row", "missing_self"),
        ),
        GalleryBug(
            key="padding_rows",
            title=msg("mask_gallery.padding_rows.title"),
            what=msg("mask_gallery.padding_rows.what", side=side, n_pad=n_pad),
            fix=msg("mask_gallery.padding_rows.fix"),
            correct=keys_real,
            buggy=rows_real,
            raw=rows_real,
            convention="keep",
            expect=pad_expect,
            lengths=lengths,
            side=pad_side,
            kinds=("attends_padding", "fully_masked_row"),
        ),
        GalleryBug(
            key="broadcast_axis",
            title=msg("mask_gallery.broadcast_axis.title"),
            what=msg("mask_gallery.broadcast_axis.what"),
            fix=msg("mask_gallery.broadcast_axis.fix"),
            correct=keys_real,
            buggy=base & real[:, None].expand(T, T),
            raw=(base & real[None, :, None].expand(1, T, T))[0],
            convention="keep",
            expect=pad_expect,
            lengths=lengths,
            side=pad_side,
            kinds=("attends_padding", "fully_masked_row"),
        ),
        GalleryBug(
            key="bool_as_additive",
            title=msg("mask_gallery.bool_as_additive.title"),
            what=msg("mask_gallery.bool_as_additive.what"),
            fix=msg("mask_gallery.bool_as_additive.fix"),
            correct=_causal(T),
            buggy=_causal(T).float(),
            raw=_causal(T).float(),
            convention="additive",
            kinds=("future_leak",),
        ),
        GalleryBug(
            key="inf_fully_masked",
            title=msg("mask_gallery.inf_fully_masked.title"),
            what=msg("mask_gallery.inf_fully_masked.what", n_pad=n_pad),
            fix=msg("mask_gallery.inf_fully_masked.fix"),
            correct=_additive(left_fixed, float("-inf"), torch.float32),
            buggy=_additive(left_keep, float("-inf"), torch.float32),
            raw=_additive(left_keep, float("-inf"), torch.float32),
            convention="additive",
            expect="causal+padding",
            lengths=lengths,
            side="left",
            kinds=("fully_masked_row",),
        ),
        GalleryBug(
            key="fp16_overflow",
            title=msg("mask_gallery.fp16_overflow.title"),
            what=msg("mask_gallery.fp16_overflow.what"),
            fix=msg("mask_gallery.fp16_overflow.fix"),
            correct=_additive(left_fixed, torch.finfo(torch.float16).min, torch.float16),
            buggy=_additive(left_keep, -1e9, torch.float16),
            raw=_additive(left_keep, -1e9, torch.float16),
            convention="additive",
            expect="causal+padding",
            lengths=lengths,
            side="left",
            kinds=("fully_masked_row",),
        ),
        GalleryBug(
            key="kv_offset",
            title=msg("mask_gallery.kv_offset.title"),
            what=msg("mask_gallery.kv_offset.what"),
            fix=msg("mask_gallery.kv_offset.fix"),
            correct=_causal(T),
            buggy=chunked,
            raw=chunk_raw,
            convention="keep",
            kinds=("future_leak",),
            q_len=chunk,
        ),
        GalleryBug(
            key="document_leak",
            title=msg("mask_decode_gallery.document_leak.title"),
            what=msg("mask_decode_gallery.document_leak.what", documents=", ".join(map(str, documents))),
            fix=msg("mask_decode_gallery.document_leak.fix"),
            correct=document_mask(documents),
            buggy=_causal(T),
            raw=_causal(T),
            convention="keep",
            expect="documents:" + ",".join(map(str, documents)),
            kinds=("cross_document",),
        ),
    ]


def diagnose_bug(bug: GalleryBug) -> Diagnosis:
    """What the mask doctor finds in a bug's raw mask, told what it should be."""
    return diagnose(
        bug.raw,
        convention=bug.convention,
        expect=parse_expect(bug.expect),
        lengths=bug.lengths,
        side=bug.side,
        q_len=bug.q_len,
    )


# the summary table's columns, and the catalogue key of each one's header (the app shows them in the reader's language)
TABLE_HEADERS = {
    "bug": "mask_gallery.col_bug",
    "finds": "mask_gallery.col_finds",
    "weight": "mask_gallery.col_weight",
    "nan": "mask_gallery.col_nan",
    "fix": "mask_gallery.col_fix",
}


def gallery_table(bugs: list[GalleryBug], record: AttentionRecord, layer: int, head: int) -> pd.DataFrame:
    """One row per bug: what the doctor finds in it, and what it does to one head of the record.

    Columns are the keys of :data:`TABLE_HEADERS`; the bug's title and fix are messages.
    """
    rows = []
    for bug in bugs:
        found = diagnose_bug(bug)
        hurt = head_effect(record, layer, head, bug.buggy, bug.intended)
        rows.append(
            {
                "bug": bug.title,
                "finds": ", ".join(sorted({p.kind for p in found.problems})),
                "weight": hurt.leaked,
                "nan": len(hurt.nan_rows),
                "fix": bug.fix,
            }
        )
    return pd.DataFrame(rows, columns=list(TABLE_HEADERS))

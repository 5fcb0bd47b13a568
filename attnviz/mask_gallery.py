"""A gallery of mask bugs, each beside the mask it should have been, for a text of T tokens.

Every entry holds both masks *as they act* (what the attention receives: bool
keep or an additive float in its dtype) and the buggy mask as its author holds
it, with the convention they would tell the mask doctor, so the doctor, the
plots and the leak test all see the same bug. Padding bugs treat the text's
last (or first) tokens as pads of a one-sequence batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from attnviz.mask_doctor import diagnose, parse_expect
from attnviz.mask_effects import blocked_by, head_effect
from attnviz.masks import batch_padding_keep
from attnviz.record import AttentionRecord

# how many of the text's tokens the padding bugs treat as pads
PAD_SHARE = 4


@dataclass(frozen=True, eq=False)
class GalleryBug:
    """One mask bug.

    correct / buggy: (T, T) masks as the attention receives them; raw: the buggy
    mask as its author holds it, read by the doctor with ``convention``;
    expect: the mask doctor's ``--expect``; lengths, side: the padding, if any;
    intended: bool (T, T), the cells the correct mask keeps; kinds: what the
    doctor reports for it.
    """

    key: str
    title: str
    what: str
    fix: str
    correct: Tensor
    buggy: Tensor
    raw: Tensor
    convention: str
    kinds: tuple[str, ...]
    expect: str = "causal"
    lengths: list[int] | None = None
    side: str = "right"

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
    real = _real(T, n_pad, pad_side)
    keys_real = batch_padding_keep(lengths, T, pad_side, causal=causal)[0]  # (T, T): pads hidden as keys
    rows_real = base & real[:, None]  # (T, T): the bug: pads hidden as queries
    left_real = _real(T, n_pad, "left")
    left_keep = _causal(T) & left_real[None, :]  # causal + left padding: the pad rows see nothing
    left_fixed = batch_padding_keep(lengths, T, "left", causal=True)[0]  # pad rows see the real tokens
    chunked = torch.ones(T, T, dtype=torch.bool).tril(1)  # query i also sees key i + 1
    upper = torch.ones(T, T, dtype=torch.bool).triu()
    no_self = torch.ones(T, T, dtype=torch.bool).tril(-1)
    return [
        GalleryBug(
            key="inverted",
            title="Inverted convention",
            what=(
                "A keep mask (True = may attend, as torch's scaled_dot_product_attention reads it) handed to an API "
                "that reads True as *blocked* (nn.MultiheadAttention): each query sees exactly what it should not, and "
                "the last query sees nothing at all (NaN)."
            ),
            fix="Invert it (~mask) when the API reads True as blocked, or pass the convention the API expects.",
            correct=_causal(T),
            buggy=~_causal(T),
            raw=_causal(T),
            convention="block",
            kinds=("inverted",),
        ),
        GalleryBug(
            key="upper_triangle",
            title="Upper triangle instead of lower (the future leaks)",
            what="torch.triu instead of torch.tril: every query sees the tokens after it and none before it.",
            fix="Keep the lower triangle: torch.ones(T, T, dtype=torch.bool).tril().",
            correct=_causal(T),
            buggy=upper,
            raw=upper,
            convention="keep",
            kinds=("future_leak", "over_masked"),
        ),
        GalleryBug(
            key="no_diagonal",
            title="Diagonal excluded: row 0 is fully masked",
            what=(
                "tril(-1) instead of tril(): no query sees itself, and the first sees nothing at all, so a plain "
                "softmax over nothing but -inf gives NaN, which then spreads to every later layer."
            ),
            fix="Keep the diagonal: tril() (diagonal=0).",
            correct=_causal(T),
            buggy=no_self,
            raw=no_self,
            convention="keep",
            kinds=("fully_masked_row", "missing_self"),
        ),
        GalleryBug(
            key="padding_rows",
            title="Padding applied to query rows instead of key columns",
            what=(
                f"The {pad_side}most {n_pad} tokens are pads. Hiding their rows instead of their columns lets every "
                "real query attend to the pads, and leaves the pad rows with nothing (NaN)."
            ),
            fix="Hide pads as keys: mask[..., None, :] (the key axis), not mask[..., :, None].",
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
            title="Broadcast on the wrong axis: (B, 1, T, 1) instead of (B, 1, 1, T)",
            what=(
                "A padding mask of shape (B, T) unsqueezed to (B, 1, T, 1) broadcasts along the keys, so it hides "
                "query rows: the same damage as padding the rows, from a shape that raises no error."
            ),
            fix="Unsqueeze to (B, 1, 1, T): attention_mask[:, None, None, :].",
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
            title="Bool and additive semantics mixed up",
            what=(
                "A keep mask cast to float (1 = keep, 0 = hide) and then added to the scores: nothing is hidden, "
                "the kept cells just gain +1, and every query sees the future."
            ),
            fix="Add 0 where kept and -inf (or the dtype's minimum) where hidden, or pass the bool mask itself.",
            correct=_causal(T),
            buggy=_causal(T).float(),
            raw=_causal(T).float(),
            convention="additive",
            kinds=("future_leak",),
        ),
        GalleryBug(
            key="inf_fully_masked",
            title="-inf in a fully masked row gives NaN",
            what=(
                f"Causal attention with {n_pad} pads on the left: each pad row sees only earlier pads, all at "
                "-inf, so softmax divides 0 by 0. The NaN spreads to every later layer that reads that position."
            ),
            fix="Let pad rows attend to the real tokens (their outputs are ignored), or fill with the dtype's minimum.",
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
            title="-1e9 overflows in float16",
            what=(
                "The same left-padded mask filled with -1e9, a 'safe' finite number, then cast to float16 with the "
                "model: float16 ends at 65,504, so -1e9 becomes -inf and the pad rows are NaN again."
            ),
            fix="Fill with torch.finfo(dtype).min of the mask's own dtype, never -1e9, and give pad rows a key.",
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
            title="Off by one in the KV-cache offset",
            what=(
                "Prefilling in chunks with a KV cache, the causal mask's offset is one too large "
                "(causal_mask(q_len, k_len, offset=start + 1)): each query sees the next token too."
            ),
            fix="The offset is the number of tokens already in the cache: causal_mask(q_len, k_len, offset=start).",
            correct=_causal(T),
            buggy=chunked,
            raw=chunked,
            convention="keep",
            kinds=("future_leak",),
        ),
    ]


def gallery_table(bugs: list[GalleryBug], record: AttentionRecord, layer: int, head: int) -> pd.DataFrame:
    """One row per bug: what the doctor finds in it, and what it does to one head of the record."""
    rows = []
    for bug in bugs:
        found = diagnose(
            bug.raw, convention=bug.convention, expect=parse_expect(bug.expect), lengths=bug.lengths, side=bug.side
        )
        hurt = head_effect(record, layer, head, bug.buggy, bug.intended)
        rows.append(
            {
                "bug": bug.title,
                "the doctor finds": ", ".join(sorted({p.kind for p in found.problems})),
                "weight on hidden keys": hurt.leaked,
                "NaN rows": len(hurt.nan_rows),
                "fix": bug.fix,
            }
        )
    return pd.DataFrame(rows)

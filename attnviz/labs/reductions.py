"""The reductions that compare a model's outputs, in float64 whatever the model ran in: next-token losses, KL of
next-token distributions (one baseline against many rows, fast: :func:`kl_rows`), cosine distances of hidden
states, the top next tokens. Over a 49,152-token vocabulary float32 is 1e-6 to 1e-4 off, as large as the effect of
a weak head."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

REDUCE_POSITIONS = 128  # positions reduced at a time: a few (128, vocab) float64 temporaries (50 MB for 49,152)
TOP_K = 5  # the top next tokens shown before and after


def next_token_losses(logits: Tensor, ids: Sequence[int]) -> Tensor:
    """Cross-entropy (nats) of predicting token t + 1 from position t, in float64: logits (T, vocab) -> (T - 1,)."""
    targets = torch.as_tensor(list(ids[1:]), dtype=torch.long)  # (T - 1,)
    log_p = torch.log_softmax(logits[:-1].double(), dim=-1)  # (T - 1, vocab)
    return -log_p.gather(-1, targets[:, None])[:, 0]


def kl_divergence(before: Tensor, after: Tensor) -> Tensor:
    """KL(softmax(before) ‖ softmax(after)) in nats at each position, in float64: (..., vocab) -> (...).

    Equal logits give exactly 0; the rounding of nearly equal ones is clamped at 0 rather than read as negative."""
    log_p = torch.log_softmax(before.double(), dim=-1)
    log_q = torch.log_softmax(after.double(), dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(dim=-1).clamp_min(0.0)


@dataclass(frozen=True, eq=False)
class Reduction:
    """A baseline's next-token distributions, computed once for every row compared with it: logits (T, vocab)
    float32 as given, p = softmax(logits) (T, vocab) float32 (from float64), lse = logsumexp(logits) (T,) float64."""

    logits: Tensor
    p: Tensor
    lse: Tensor

    @property
    def nbytes(self) -> int:
        return int(self.p.numel() * self.p.element_size() + self.lse.numel() * 8)


def reduction_of(before: Tensor, positions: int = REDUCE_POSITIONS) -> Reduction:
    """:class:`Reduction` of baseline logits (T, vocab), ``positions`` at a time in float64."""
    p = torch.empty_like(before, dtype=torch.float32)
    lse = torch.empty(before.shape[0], dtype=torch.float64)
    for start in range(0, before.shape[0], positions):
        end = min(before.shape[0], start + positions)
        chunk = before[start:end].double()
        lse[start:end] = torch.logsumexp(chunk, dim=-1)
        p[start:end] = (chunk - lse[start:end, None]).exp().float()
    return Reduction(before, p, lse)


BIG_CHANGE = 12.0  # a position where a logit moved by more than this (e^12 ~ 1.6e5) past the mean shift: in float64
SUM_BLOCK = 128  # float32 sums of this many terms, then added in float64: 7 times faster than a float64 sum


def _sum64(x: Tensor) -> Tensor:
    """Σ over the last dimension in float64 of float32 terms: blocks of SUM_BLOCK summed in float32 (their rounding
    ~1e-7 of the block's Σ|x|), the blocks' sums added in float64: (P, V) -> (P,)."""
    whole = x.shape[-1] - x.shape[-1] % SUM_BLOCK
    blocks = x[:, :whole].reshape(x.shape[0], -1, SUM_BLOCK).sum(dim=-1).sum(dim=-1, dtype=torch.float64)
    return blocks + x[:, whole:].sum(dim=-1, dtype=torch.float64)


def _kl_direct(p64: Tensor, log_p: Tensor, a: Tensor) -> tuple[Tensor, Tensor]:
    """KL(p ‖ softmax(a)) and logsumexp(a) for one chunk (P, vocab), directly in float64: (P,), (P,)."""
    lse = torch.logsumexp(a.double(), dim=-1)  # (P,)
    return (p64 * (log_p - (a.double() - lse[:, None]))).sum(dim=-1).clamp_min(0.0), lse


def kl_rows(
    before: Tensor,
    after: Tensor,
    positions: int = REDUCE_POSITIONS,
    ids: Sequence[int] | None = None,
    reduction: Reduction | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """:func:`kl_divergence` of one baseline against R rows, ``positions`` at a time so that no (T, vocab) float64
    distribution is held: before (T, vocab), after (R, T, vocab) -> (R, T) float64. With ``ids``, also each row's
    next-token losses (R, T - 1), as :func:`next_token_losses` gives them. ``reduction``: the baseline's, when it
    was computed once for many calls.

    With d = a − b − c (a row's logits less the baseline's, less their p-weighted mean c: small where a head
    changes little), KL(p ‖ q) = log Σ p e^d − Σ p d exactly, computed as log1p(Σ p expm1(d)) − Σ p d, each product
    in float32 (6e-8 of itself) summed in float64 by blocks (:func:`_sum64`): no float64 exponential over the
    vocabulary. logsumexp(a) = logsumexp(b) + c + log1p(Σ p expm1(d)). A position where some |d| passes BIG_CHANGE
    is reduced directly in float64. On SmolLM2's heads at 256 tokens the largest difference from the float64
    log-softmax of every row is 2.5e-7 at one position, 1e-9 in a head's mean; 3 times faster."""
    red = reduction if reduction is not None else reduction_of(before, positions)
    out = torch.empty(after.shape[:2], dtype=torch.float64)  # (R, T)
    losses = torch.empty((after.shape[0], max(0, before.shape[0] - 1)), dtype=torch.float64)  # (R, T - 1)
    targets = None if ids is None else torch.as_tensor(list(ids[1:]), dtype=torch.long)  # (T - 1,)
    for start in range(0, before.shape[0], positions):
        end = min(before.shape[0], start + positions)
        p, b, lse_b = red.p[start:end], red.logits[start:end], red.lse[start:end]  # (P, vocab), (P, vocab), (P,)
        for row in range(after.shape[0]):
            a = after[row, start:end]  # (P, vocab) float32
            d = a - b
            shift = _sum64(p * d).float()  # (P,) Σ p d: KL is the same for d less any constant a position
            d = d - shift[:, None]  # small where the row's distribution is close to the baseline's
            grown = torch.log1p(_sum64(p * torch.expm1(d)))  # (P,) log Σ p e^d
            kl = (grown - _sum64(p * d)).clamp_min(0.0)
            lse = lse_b + shift.double() + grown
            far = d.abs().amax(dim=-1) > BIG_CHANGE  # (P,) positions reduced the direct way
            if bool(far.any()):
                log_p = b[far].double() - lse_b[far, None]  # (F, vocab) float64, as exact as the baseline allows
                kl[far], lse[far] = _kl_direct(log_p.exp(), log_p, a[far])
            out[row, start:end] = kl
            if targets is not None and start < targets.shape[0]:
                last = min(end, targets.shape[0])
                picked = a[: last - start].gather(-1, targets[start:last, None])[:, 0].double()  # (P',)
                losses[row, start:last] = lse[: last - start] - picked
    return out if targets is None else (out, losses)


def cosine_distance(before: Tensor, after: Tensor) -> Tensor:
    """1 − cos(before, after) at each position, in float64: (..., d) -> (...); two zero vectors are 0 apart."""
    before, after = before.double(), after.double()
    dot = (before * after).sum(dim=-1)
    norms = before.norm(dim=-1) * after.norm(dim=-1)
    cos = dot / norms.clamp_min(torch.finfo(torch.float64).tiny)
    distance = torch.where(norms > 0, (1.0 - cos).clamp_min(0.0), torch.ones_like(dot))
    return torch.where((before == after).all(dim=-1), torch.zeros_like(dot), distance)  # equal: exactly 0


def top_tokens(logits: Tensor, k: int = TOP_K) -> tuple[Tensor, Tensor]:
    """The k most likely next tokens at each position: logits (T, vocab) -> ids (T, k), probabilities (T, k)."""
    probs = torch.softmax(logits.double(), dim=-1)
    values, ids = probs.topk(min(k, probs.shape[-1]), dim=-1)
    return ids, values

"""The reductions that compare a model's outputs, in float64 whatever the model ran in: next-token losses, KL of
next-token distributions (one baseline against many rows, fast: :func:`kl_rows`), cosine distances of hidden
states, the top next tokens. Over a 49,152-token vocabulary float32 is 1e-6 to 1e-4 off, as large as the effect of
a weak head.

"float64" is :func:`~attnviz.core.attention.reduction_dtype` of the tensors' device, the one place that chooses it:
float64 on the host, where the sweep's outputs are (:class:`~attnviz.models.source.AblatedOutputs`), so every number
there is what it was; float32 on a device without float64 (MPS) or where it is slow, instead of a failure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.core.attention import reduction_dtype

REDUCE_POSITIONS = 128  # positions reduced at a time: a few (128, vocab) float64 temporaries (50 MB for 49,152)
TOP_K = 5  # the top next tokens shown before and after


def next_token_losses(logits: Tensor, ids: Sequence[int]) -> Tensor:
    """Cross-entropy (nats) of predicting token t + 1 from position t, in float64: logits (T, vocab) -> (T - 1,)."""
    targets = torch.as_tensor(list(ids[1:]), dtype=torch.long, device=logits.device)  # (T - 1,)
    log_p = torch.log_softmax(logits[:-1].to(reduction_dtype(logits.device)), dim=-1)  # (T - 1, vocab)
    return -log_p.gather(-1, targets[:, None])[:, 0]


def kl_divergence(before: Tensor, after: Tensor) -> Tensor:
    """KL(softmax(before) ‖ softmax(after)) in nats at each position, in float64: (..., vocab) -> (...).

    Equal logits give exactly 0; the rounding of nearly equal ones is clamped at 0 rather than read as negative."""
    wide = reduction_dtype(after.device)
    log_p = torch.log_softmax(before.to(wide), dim=-1)
    log_q = torch.log_softmax(after.to(wide), dim=-1)
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
        return int(self.p.numel() * self.p.element_size() + self.lse.numel() * self.lse.element_size())


def reduction_of(before: Tensor, positions: int = REDUCE_POSITIONS) -> Reduction:
    """:class:`Reduction` of baseline logits (T, vocab), ``positions`` at a time in float64."""
    wide = reduction_dtype(before.device)
    p = torch.empty_like(before, dtype=torch.float32)
    lse = torch.empty(before.shape[0], dtype=wide, device=before.device)
    for start in range(0, before.shape[0], positions):
        end = min(before.shape[0], start + positions)
        chunk = before[start:end].to(wide)
        lse[start:end] = torch.logsumexp(chunk, dim=-1)
        p[start:end] = (chunk - lse[start:end, None]).exp().float()
    return Reduction(before, p, lse)


BIG_CHANGE = 12.0  # a position where a logit moved by more than this (e^12 ~ 1.6e5) past the mean shift: in float64
SUM_BLOCK = 128  # float32 sums of this many terms, then added in float64: 7 times faster than a float64 sum


def _sum64(x: Tensor) -> Tensor:
    """Σ over the last dimension in float64 (the reduction dtype) of float32 terms: blocks of SUM_BLOCK summed in
    float32 (their rounding ~1e-7 of the block's Σ|x|), the blocks' sums added in float64: (P, V) -> (P,)."""
    wide = reduction_dtype(x.device)
    whole = x.shape[-1] - x.shape[-1] % SUM_BLOCK
    blocks = x[:, :whole].reshape(x.shape[0], -1, SUM_BLOCK).sum(dim=-1).sum(dim=-1, dtype=wide)
    return blocks + x[:, whole:].sum(dim=-1, dtype=wide)


def _kl_direct(p64: Tensor, log_p: Tensor, a: Tensor) -> tuple[Tensor, Tensor]:
    """KL(p ‖ softmax(a)) and logsumexp(a) for one chunk (P, vocab), directly in float64: (P,), (P,)."""
    a = a.to(reduction_dtype(a.device))
    lse = torch.logsumexp(a, dim=-1)  # (P,)
    return (p64 * (log_p - (a - lse[:, None]))).sum(dim=-1).clamp_min(0.0), lse


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
    wide, device = reduction_dtype(after.device), after.device
    out = torch.empty(after.shape[:2], dtype=wide, device=device)  # (R, T)
    losses = torch.empty((after.shape[0], max(0, before.shape[0] - 1)), dtype=wide, device=device)  # (R, T - 1)
    targets = None if ids is None else torch.as_tensor(list(ids[1:]), dtype=torch.long, device=device)  # (T - 1,)
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
            lse = lse_b + shift.to(wide) + grown
            far = d.abs().amax(dim=-1) > BIG_CHANGE  # (P,) positions reduced the direct way
            if bool(far.any()):
                log_p = b[far].to(wide) - lse_b[far, None]  # (F, vocab) float64, as exact as the baseline allows
                kl[far], lse[far] = _kl_direct(log_p.exp(), log_p, a[far])
            out[row, start:end] = kl
            if targets is not None and start < targets.shape[0]:
                last = min(end, targets.shape[0])
                picked = a[: last - start].gather(-1, targets[start:last, None])[:, 0].to(wide)  # (P',)
                losses[row, start:last] = lse[: last - start] - picked
    return out if targets is None else (out, losses)


VOCAB_BLOCK = 1024  # next-token logits formed this many tokens of the vocabulary at a time: they stay in cache


@dataclass(frozen=True, eq=False)
class HeadReduction:
    """A baseline's distributions with the LM head that forms every row's logits from what the head reads
    (:func:`kl_through_head`): weight (vocab, d) and bias (vocab,) or None as the model holds them; mean_row (T, d)
    float64, Σ_v p_v W_v at each position; offset (T,) float64, Σ_v p_v (b_v − bias_v): a row's Σ_v p_v a_v less the
    baseline's is x·mean_row − offset, without its logits."""

    reduction: Reduction
    weight: Tensor
    bias: Tensor | None
    mean_row: Tensor
    offset: Tensor

    @property
    def nbytes(self) -> int:
        """What it holds beyond its :class:`Reduction` and the model's own head: mean_row and offset."""
        return int((self.mean_row.numel() + self.offset.numel()) * self.mean_row.element_size())

    @property
    def row_width(self) -> int:
        """A row's float32 values at each position in :func:`kl_through_head`: what the head reads, a block's logits
        and three temporaries of their size."""
        return int(self.mean_row.shape[1] + 4 * VOCAB_BLOCK)

    def pass_bytes(self, rows: int) -> int:
        """:func:`kl_through_head`'s peak for ``rows`` rows: their :attr:`row_width` at every position, and a chunk
        of positions reduced the direct way (its logits and three float64 temporaries)."""
        return (
            4 * rows * self.mean_row.shape[0] * self.row_width + (4 + 3 * 8) * REDUCE_POSITIONS * self.weight.shape[0]
        )


def head_reduction(reduction: Reduction, weight: Tensor, bias: Tensor | None) -> HeadReduction:
    """:class:`HeadReduction` of a baseline's :class:`Reduction` and the LM head (weight (vocab, d), bias)."""
    wide = reduction_dtype(weight.device)
    p = reduction.p.to(wide)  # (T, vocab)
    mean_row = p @ weight.to(wide)  # (T, d)
    offset = (p * reduction.logits.to(wide)).sum(dim=-1)
    if bias is not None:
        offset = offset - p @ bias.to(wide)
    return HeadReduction(reduction, weight, bias, mean_row, offset)


def kl_through_head(
    reads: Tensor, head: HeadReduction, ids: Sequence[int] | None = None, block: int = VOCAB_BLOCK
) -> Tensor | tuple[Tensor, Tensor]:
    """:func:`kl_rows` of R rows given by what the LM head reads, reads (R, T, d), without any row's (T, vocab)
    logits held: each block of ``block`` tokens' logits is formed by the head (in the model's dtype, then float32,
    as the model's logits are) and reduced at once while it is in cache: Σ p expm1(d) and Σ p d in float64 by
    blocks (:func:`_sum64`), d centred by the exact Σ p a − Σ p b from ``head.mean_row``. A position where some |d|
    passes BIG_CHANGE is reduced directly in float64 from its whole row of logits, formed again. With ``ids``, also
    the next-token losses (R, T - 1). The same formula as :func:`kl_rows`, in another order of blocks: within
    1e-9 of it on SmolLM2's heads."""
    red = head.reduction
    R, T, _ = reads.shape
    vocab = head.weight.shape[0]
    wide, device = reduction_dtype(reads.device), reads.device
    shift = (reads.to(wide) * head.mean_row[None]).sum(dim=-1) - head.offset[None]  # (R, T) float64
    shift32 = shift.float()
    grown_sum = torch.zeros(R * T, dtype=wide, device=device)
    linear_sum = torch.zeros(R * T, dtype=wide, device=device)
    largest = torch.zeros(R * T, device=device)
    moved = torch.zeros(R * T, dtype=torch.bool, device=device)  # a position whose logits differ from the baseline's
    targets = None if ids is None else torch.as_tensor(list(ids[1:]), dtype=torch.long, device=device)  # (T - 1,)
    picked = torch.zeros(R, max(0, T - 1), dtype=wide, device=device)
    for start in range(0, vocab, block):
        end = min(vocab, start + block)
        bias = None if head.bias is None else head.bias[start:end]
        a = torch.nn.functional.linear(reads, head.weight[start:end], bias).float()  # (R, T, C)
        raw = a - red.logits[None, :, start:end]  # (R, T, C)
        moved |= (raw != 0).any(dim=-1).reshape(-1)
        d = raw - shift32[..., None]
        p = red.p[None, :, start:end]  # (1, T, C)
        grown_sum += _sum64((p * torch.expm1(d)).reshape(R * T, -1))
        linear_sum += _sum64((p * d).reshape(R * T, -1))
        largest = torch.maximum(largest, d.abs().amax(dim=-1).reshape(-1))
        if targets is not None:
            inside = ((targets >= start) & (targets < end)).nonzero()[:, 0]  # positions whose next token is here
            if inside.numel():
                picked[:, inside] = a[:, inside, targets[inside] - start].to(wide)
    grown = torch.log1p(grown_sum)
    kl = (grown - linear_sum).clamp_min(0.0).reshape(R, T)
    lse = red.lse[None] + shift + grown.reshape(R, T)  # (R, T)
    still = ~moved.reshape(R, T)  # the baseline's logits exactly: KL 0, its log-normaliser, as kl_rows gives them
    kl[still] = 0.0
    lse[still] = red.lse[None].expand(R, T)[still]
    far = (largest > BIG_CHANGE).reshape(R, T).nonzero()
    for start in range(0, far.shape[0], REDUCE_POSITIONS):  # the direct way, from each one's whole row of logits
        rows, positions = far[start : start + REDUCE_POSITIONS, 0], far[start : start + REDUCE_POSITIONS, 1]
        a = torch.nn.functional.linear(reads[rows, positions], head.weight, head.bias).float()  # (F, vocab)
        log_p = red.logits[positions].to(wide) - red.lse[positions, None]
        kl[rows, positions], lse[rows, positions] = _kl_direct(log_p.exp(), log_p, a)
    if targets is None:
        return kl
    return kl, lse[:, : T - 1] - picked


def cosine_distance(before: Tensor, after: Tensor) -> Tensor:
    """1 − cos(before, after) at each position, in :func:`~attnviz.core.attention.reduction_dtype` of their device
    (float64 on the CPU): (..., d) -> (...); two zero vectors are 0 apart."""
    wide = reduction_dtype(after.device)
    before, after = before.to(after.device, wide), after.to(wide)  # a baseline kept on the host meets the row's device
    dot = (before * after).sum(dim=-1)
    norms = before.norm(dim=-1) * after.norm(dim=-1)
    cos = dot / norms.clamp_min(torch.finfo(wide).tiny)
    distance = torch.where(norms > 0, (1.0 - cos).clamp_min(0.0), torch.ones_like(dot))
    return torch.where((before == after).all(dim=-1), torch.zeros_like(dot), distance)  # equal: exactly 0


def top_tokens(logits: Tensor, k: int = TOP_K) -> tuple[Tensor, Tensor]:
    """The k most likely next tokens at each position: logits (T, vocab) -> ids (T, k), probabilities (T, k)."""
    probs = torch.softmax(logits.to(reduction_dtype(logits.device)), dim=-1)
    values, ids = probs.topk(min(k, probs.shape[-1]), dim=-1)
    return ids, values

"""What a mask does to real attention: one head under a mask as frameworks apply it, and the leak test.

A mask is given as a framework would receive it: bool (True = may attend) or
additive float, in its own dtype, so the bugs it carries act as they would:
-1e9 in float16 is -inf, a bool mask cast to float and added masks nothing, a
row with no key left gives NaN under a plain softmax. Scores come from the
capture's q and k (after RoPE), so the head is the model's own.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.core.capture import head_scores, weights_window
from attnviz.core.progress import Progress, or_none
from attnviz.i18n.message import Message, msg
from attnviz.labs.masks.doctor import Expectation, expected_keep
from attnviz.labs.masks.reading import additive_blocked
from attnviz.models.record import AttentionRecord
from attnviz.models.source import AttentionSource

# a state changed when it moved by more than this, relative to its largest component
LEAK_TOLERANCE = 1e-5


def acting_weights(scores: Tensor, mask: Tensor) -> Tensor:
    """softmax(scores + mask) as a plain framework computes it: scores (..., q_len, k_len) -> weights, same shape.

    A bool mask hides its False cells (-inf); a float mask is added in its own
    dtype (float16 rounds -1e9 to -inf). A row with nothing left is NaN, as in
    ``torch.softmax``: attnviz's own attention zeroes such rows, most code does not.
    """
    if mask.dtype == torch.bool:
        return torch.softmax(scores.float().masked_fill(~mask, -math.inf), dim=-1)
    if not mask.is_floating_point():
        raise TypeError(f"a mask must be bool (True = may attend) or an additive float, not {mask.dtype}")
    return torch.softmax((scores.to(mask.dtype) + mask).float(), dim=-1)


def blocked_by(mask: Tensor) -> Tensor:
    """Which cells a mask hides as it acts: bool False, or an additive -inf or value at or below -1e4 (same shape)."""
    if mask.dtype == torch.bool:
        return ~mask
    return additive_blocked(mask)


def meant_keep(
    keep: Tensor, expect: Expectation | None, *, lengths: list[int] | None = None, side: str = "right"
) -> Tensor:
    """bool (T, T): the cells a mask is *meant* to keep, against which its leak is measured.

    With an expectation (what the user says the mask should be) it is the expectation's mask, so a mask that keeps
    the future (an upper triangle meant to be causal) shows the weight it puts there; without one it is the mask's
    own ``keep``, and then nothing can leak. So it is too for an expectation the text cannot have (packed
    documents of another total length: the doctor's ``bad_shape``).
    """
    T = keep.shape[-1]
    if expect is None or (expect.kind == "documents" and sum(expect.documents) != T):
        return keep
    meant = expected_keep(expect, T, lengths=lengths if expect.needs_lengths else None, side=side)
    return meant.reshape(T, T) if meant.ndim == 3 else meant  # one sequence: (1, T, T) -> (T, T)


@dataclass(frozen=True)
class HeadEffect:
    """One head of one layer under a mask, beside the same head under the model's own mask.

    reference: the model's own weights (q_len, k_len); weights: under the mask as
    it acts (NaN rows where nothing is left); difference: weights - reference;
    intended: bool, the cells the mask is meant to keep; leaked: the largest
    weight on a cell it is meant to hide (0 when it works; NaN rows aside);
    nan_rows: the query rows that came out NaN.
    """

    reference: Tensor
    weights: Tensor
    difference: Tensor
    intended: Tensor
    leaked: float
    nan_rows: list[int]

    @property
    def changed(self) -> float:
        """The largest |difference| over rows that are not NaN (0 when the mask does what the model does)."""
        finite = self.difference[~torch.isnan(self.difference)]
        return float(finite.abs().max()) if finite.numel() else 0.0


def head_effect(record: AttentionRecord, layer: int, head: int, mask: Tensor, intended: Tensor) -> HeadEffect:
    """Head ``head`` of layer ``layer`` on the record's text under ``mask`` (T, T) as it acts."""
    T = record.q_len
    if tuple(mask.shape) != (T, T) or tuple(intended.shape) != (T, T):
        raise ValueError(f"the masks must be ({T}, {T}) for this text, not {tuple(mask.shape)}")
    capture = record.layers[layer]
    scores = head_scores(capture, head, (0, T), (0, T))  # (T, T), scaled, before any mask
    weights = acting_weights(scores, mask)  # (T, T)
    reference = weights_window(capture, head, (0, T), (0, T), limit=T * T)  # (T, T)
    nan = torch.isnan(weights).any(dim=-1)  # (T,)
    on_hidden = weights.masked_fill(intended, 0.0)[~nan]
    return HeadEffect(
        reference=reference,
        weights=weights,
        difference=weights - reference,
        intended=intended,
        leaked=float(on_hidden.max()) if on_hidden.numel() else 0.0,
        nan_rows=torch.nonzero(nan).flatten().tolist(),
    )


@dataclass(frozen=True)
class LeakTest:
    """The empirical leak test: change the tokens after a cut and see which earlier states move.

    cuts: the positions from which the tokens were replaced; change: (T,) for
    each row, the largest relative change of its last hidden state over the
    cuts after it (NaN for rows after the last cut: never tested); leaked_rows:
    rows that moved by more than ``tolerance``.
    """

    cuts: list[int]
    change: Tensor
    leaked_rows: list[int]
    tolerance: float

    @property
    def leaks(self) -> bool:
        return bool(self.leaked_rows)

    @property
    def max_change(self) -> float:
        tested = self.change[~torch.isnan(self.change)]
        return float(tested.max()) if tested.numel() else 0.0

    def describe(self) -> Message:
        """What was done and what it found, in Markdown with the numbers."""
        done = msg("mask_effects.done", cuts=", ".join(map(str, self.cuts)))
        if self.leaks:
            return msg("mask_effects.leaks", done=done, n=len(self.leaked_rows), change=self.max_change)
        return msg("mask_effects.no_leak", done=done, change=self.max_change)


def describe_bug_effect(effect: HeadEffect, leak: LeakTest) -> Message:
    """A bug's effect on one head and on the whole model, in Markdown with the numbers."""
    on_model = msg("mask_effects.bug_leaks", n=len(leak.leaked_rows)) if leak.leaks else msg("mask_effects.bug_no_leak")
    return msg("mask_effects.bug_effect", leaked=effect.leaked, n_nan=len(effect.nan_rows), on_model=on_model)


def mask_digest(mask: Tensor) -> str:
    """A short fingerprint of a mask's values and dtype, to key cached results by."""
    return hashlib.sha1(mask.contiguous().numpy().tobytes() + str(mask.dtype).encode()).hexdigest()


def leak_cuts(n_tokens: int) -> list[int]:
    """Where the test changes the future: at a quarter, half and three quarters of the text (every row before)."""
    return sorted({c for c in (n_tokens // 4, n_tokens // 2, 3 * n_tokens // 4) if 0 < c < n_tokens})


def leak_test(
    source: AttentionSource,
    text: str,
    max_tokens: int,
    mask: Tensor,
    seed: int = 0,
    tolerance: float = LEAK_TOLERANCE,
    progress: Progress | None = None,
) -> LeakTest:
    """Run the model under ``mask`` (T, T), then again with the tokens after each cut replaced (``progress``: a
    step a run).

    Under a mask that hides the future, a row's state depends only on the
    tokens at or before it, so rows before a cut do not move at all. A row that
    moves saw a changed token: the mask leaks (through any layer).
    """
    progress = or_none(progress)
    progress.plan([("progress.run", 1 + len(leak_cuts(mask.shape[-1])))])  # the mask is (T, T): the cuts are known
    base = source.states_under_mask(text, max_tokens, mask)  # (T, d_model)
    progress.step()
    T = base.shape[0]
    size = base.abs().amax(dim=-1).clamp_min(1e-12)  # (T,)
    change = torch.full((T,), math.nan)
    cuts = leak_cuts(T)
    for cut in cuts:
        changed = source.states_under_mask(text, max_tokens, mask, perturb_from=cut, seed=seed)
        progress.step()
        moved = ((changed[:cut] - base[:cut]).abs().amax(dim=-1) / size[:cut]).nan_to_num(nan=math.inf)  # (cut,)
        change[:cut] = torch.fmax(change[:cut], moved)
    leaked = torch.nonzero(change > tolerance).flatten().tolist()
    return LeakTest(cuts=cuts, change=change, leaked_rows=leaked, tolerance=tolerance)

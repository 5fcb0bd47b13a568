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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from attnviz.core.capture import head_scores, weights_window
from attnviz.core.masks import causal_mask
from attnviz.core.progress import Progress, or_none
from attnviz.i18n.message import Message, PluralS, concat, msg
from attnviz.labs.masks.doctor import Expectation, expected_keep
from attnviz.labs.masks.expectations import real_tokens
from attnviz.labs.masks.reading import additive_blocked
from attnviz.models.record import AttentionRecord
from attnviz.models.source import AttentionSource

# a state changed when it moved by more than this, relative to its largest component
LEAK_TOLERANCE = 1e-5
# at most this many cuts chosen from the mask (each a run of the model), besides the spread of leak_cuts: a decode
# step of up to 7 queries off by one gets a cut for every row
MASK_CUTS = 6


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


def counted_rows(n_tokens: int, lengths: list[int] | None, side: str = "right") -> Tensor | None:
    """bool (T,): the rows whose output counts, the real tokens of a padded sequence (padding rows are
    don't-care, as the doctor treats them); None without lengths: every row counts."""
    if lengths is None:
        return None
    return real_tokens(lengths, 1, n_tokens, side)[0]


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
    cuts after it at which it was tested (NaN for a row never tested: after the
    last cut, meant to see the changed tokens, a padding row, or NaN under the
    mask); leaked_rows: tested rows that moved by more than ``tolerance``;
    nan_rows: rows whose state is NaN under the mask (a softmax over no key),
    which cannot be tested; missed: rows that keep a key past what they are meant to see but that no cut tests
    at once (more would have been needed, a run each: they move only through later layers, if at all).
    """

    cuts: list[int]
    change: Tensor
    leaked_rows: list[int]
    tolerance: float
    nan_rows: list[int] = field(default_factory=list)
    missed: list[int] = field(default_factory=list)

    @property
    def leaks(self) -> bool:
        return bool(self.leaked_rows)

    @property
    def tested_rows(self) -> list[int]:
        return torch.nonzero(~torch.isnan(self.change)).flatten().tolist()

    @property
    def max_change(self) -> float:
        tested = self.change[~torch.isnan(self.change)]
        return float(tested.max()) if tested.numel() else 0.0

    def describe(self, queries: Sequence[int] = ()) -> Message:
        """What was done and what it found, in Markdown with the numbers: which rows were tested, and which were
        not and why. queries: a decode step's query rows (the text's last), named as such where untested."""
        if not self.cuts:
            return msg("mask_verdict.leak_nothing_to_test")
        done = msg("mask_effects.done", cuts=", ".join(map(str, self.cuts)))
        untested = self.rows_said(queries)  # the rows tested; those it could not test (NaN, after the last cut, a
        if self.nan_rows:  # decode step's last query), and those it did not test at once (too many cuts)
            nan = msg("mask_verdict.leak_nan_rows", n=len(self.nan_rows), rows=positions_text(self.nan_rows))
            untested = concat(untested, nan)
        if self.missed:
            missed = msg("mask_verdict.leak_missed", n=len(self.missed), rows=positions_text(self.missed))
            untested = concat(untested, missed)
        change = self.max_change
        if self.leaks:
            n, rows = len(self.leaked_rows), positions_text(self.leaked_rows)
            return msg("mask_effects.leaks", done=done, n=n, s=PluralS(n), rows=rows, change=change, nan=untested)
        n = len(self.tested_rows)
        return msg("mask_effects.no_leak", done=done, n=n, s=PluralS(n), change=change, nan=untested)

    def rows_said(self, queries: Sequence[int] = ()) -> Message:
        """Which rows the test checked, and which rows at or after the last cut it could not check and why (no
        token after them was changed): a decode step's queries (``queries``) by that name."""
        tested = self.tested_rows
        said = msg("mask_leak_rows.tested", rows=ranges_text(tested), s=PluralS(len(tested))) if tested else ""
        last_cut, T = max(self.cuts), self.change.shape[0]
        after = [r for r in range(last_cut, T) if r not in tested and r not in self.nan_rows]
        steps = [r for r in after if r in set(queries)]
        others = [r for r in after if r not in set(queries)]
        if others:
            cut = msg("mask_leak_rows.after_last_cut", rows=ranges_text(others), s=PluralS(len(others)), cut=last_cut)
            said = concat(said, cut)
        if steps:
            key = "mask_leak_rows.decode_query_one" if len(steps) == 1 else "mask_leak_rows.decode_queries"
            said = concat(said, msg(key, rows=ranges_text(steps), cut=last_cut))
        return said


def ranges_text(positions: Sequence[int]) -> str:
    """Positions as runs: [0, 1, 2, 3, 7, 9, 10] -> "0–3, 7, 9–10"."""
    runs: list[list[int]] = []
    for p in sorted(positions):
        if runs and p == runs[-1][1] + 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs)


def positions_text(positions: list[int], limit: int = 8) -> str:
    """Query positions for a message: "3, 5, 8", or the first ``limit`` and how many in all: "0, 1, … 7, … (12)"."""
    shown = ", ".join(map(str, positions[:limit]))
    return shown if len(positions) <= limit else f"{shown}, … ({len(positions)})"


def describe_bug_effect(effect: HeadEffect, leak: LeakTest) -> Message:
    """A bug's effect on one head and on the whole model, in Markdown with the numbers."""
    on_model = msg("mask_effects.bug_leaks", n=len(leak.leaked_rows)) if leak.leaks else msg("mask_effects.bug_no_leak")
    return msg("mask_effects.bug_effect", leaked=effect.leaked, n_nan=len(effect.nan_rows), on_model=on_model)


def mask_digest(mask: Tensor) -> str:
    """A short fingerprint of a mask's values and dtype, to key cached results by."""
    return hashlib.sha1(mask.contiguous().numpy().tobytes() + str(mask.dtype).encode()).hexdigest()


def leak_cuts(n_tokens: int) -> list[int]:
    """The spread of cuts: at a quarter, half and three quarters of the text (every row before is tested)."""
    return sorted({c for c in (n_tokens // 4, n_tokens // 2, 3 * n_tokens // 4) if 0 < c < n_tokens})


def reach(keep: Tensor) -> Tensor:
    """bool (T, T) -> (T, T): the tokens a row's last state may depend on through any number of layers that
    attend under ``keep`` (itself included), the transitive closure of keep."""
    T = keep.shape[-1]
    reached = keep | torch.eye(T, dtype=torch.bool)  # (T, T)
    while True:
        wider = reached | ((reached.float() @ reached.float()) > 0)  # (T, T): one more hop
        if torch.equal(wider, reached):
            return reached
        reached = wider


def meant_ends(meant: Tensor) -> Tensor:
    """(T,) int64: the last position each row is meant to depend on under ``meant`` (bool (T, T)), through any
    number of layers; at least the row itself. A cut after it may move the row only by a leak."""
    T = meant.shape[-1]
    return torch.where(reach(meant), torch.arange(T), -1).amax(dim=-1)  # (T,)


def suspects(keep: Tensor, meant: Tensor, rows: Tensor | None = None) -> dict[int, tuple[int, int]]:
    """The rows of ``keep`` (bool (T, T)) that keep a key after what ``meant`` lets them reach, each with the
    cuts that catch it at once: row r, keeping keys up to k past its meant end e(r), moves (through the first
    layer already) when the tokens from any cut c in [e(r) + 1, k] change. rows: bool (T,), the rows whose
    output counts (None: all)."""
    T = keep.shape[-1]
    ends = meant_ends(meant)  # (T,)
    beyond = keep & (torch.arange(T)[None, :] > ends[:, None])  # (T, T): kept keys past the meant end
    if rows is not None:
        beyond = beyond & rows[:, None]
    found = torch.nonzero(beyond.any(dim=-1)).flatten().tolist()
    return {r: (int(ends[r]) + 1, int(torch.nonzero(beyond[r]).max())) for r in found}


def suspect_cuts(spans: Iterable[tuple[int, int]], most: int = MASK_CUTS) -> list[int]:
    """Cuts that catch every row of :func:`suspects` (its ``spans``) at once: the fewest that fall in each row's
    span (greedy, by the span's end), at most ``most`` of them, spread over the text when more would be needed
    (the rows between are then caught through later layers, or not at all: :attr:`LeakTest.missed`)."""
    cuts: list[int] = []
    for first, last in sorted(spans, key=lambda span: span[1]):
        if not cuts or cuts[-1] < first:  # the last cut does not fall in this row's span
            cuts.append(last)
    if len(cuts) > most:
        cuts = [cuts[round(i * (len(cuts) - 1) / (most - 1))] for i in range(most)] if most > 1 else cuts[:1]
    return cuts


def tested_rows(cut: int, ends: Tensor, rows: Tensor | None = None) -> Tensor:
    """bool (T,): the rows a cut tests: before it and not meant to depend on any token from it on."""
    T = ends.shape[0]
    tested = (torch.arange(T) < cut) & (ends < cut)
    return tested if rows is None else tested & rows


def leak_test(
    source: AttentionSource,
    text: str,
    max_tokens: int,
    mask: Tensor,
    meant: Tensor | None = None,
    rows: Tensor | None = None,
    seed: int = 0,
    tolerance: float = LEAK_TOLERANCE,
    progress: Progress | None = None,
) -> LeakTest:
    """Run the model under ``mask`` (T, T) as it acts, then again with the tokens after each cut replaced
    (``progress``: a step a run).

    meant: bool (T, T), what the mask is meant to keep (None: causal, nothing after a query); rows: bool (T,),
    the rows whose output counts (None: all; padding rows are don't-care). A row is tested at a cut when it
    comes before it and ``meant`` lets it depend on nothing from the cut on (through any number of layers): it
    must not move at all, so a row that moves saw a changed token the mask is meant to hide from it (through any
    layer). The cuts are those of :func:`suspect_cuts` (a cut in the span of every row the mask lets see past
    its meant end, within a few) and the spread of :func:`leak_cuts`, without those that would test no row.
    """
    progress = or_none(progress)
    T = mask.shape[-1]
    keep = ~blocked_by(mask)  # (T, T)
    meant = causal_mask(T) if meant is None else meant
    ends = meant_ends(meant)  # (T,)
    spans = suspects(keep, meant, rows)
    candidates = sorted(set(suspect_cuts(spans.values())) | set(leak_cuts(T)))
    cuts = [c for c in candidates if bool(tested_rows(c, ends, rows).any())]
    missed = [r for r, (first, last) in spans.items() if not any(first <= c <= last for c in cuts)]
    change = torch.full((T,), math.nan)
    if not cuts:
        return LeakTest(cuts=[], change=change, leaked_rows=[], tolerance=tolerance, missed=missed)
    progress.plan([("progress.run", 1 + len(cuts))])
    base = source.states_under_mask(text, max_tokens, mask)  # (T, d_model)
    progress.step()
    size = base.abs().amax(dim=-1).clamp_min(1e-12)  # (T,)
    finite = torch.isfinite(base).all(dim=-1)  # (T,): a NaN row cannot be tested
    for cut in cuts:
        changed = source.states_under_mask(text, max_tokens, mask, perturb_from=cut, seed=seed)
        progress.step()
        moved = ((changed - base).abs().amax(dim=-1) / size).nan_to_num(nan=math.inf)  # (T,): NaN after: moved
        tested = tested_rows(cut, ends, rows) & finite  # (T,)
        change[tested] = torch.fmax(change[tested], moved[tested])
    leaked = torch.nonzero(change > tolerance).flatten().tolist()
    missed = [r for r in missed if r not in leaked]  # caught through a later layer after all
    nan_rows = torch.nonzero(~finite).flatten().tolist()
    return LeakTest(cuts=cuts, change=change, leaked_rows=leaked, tolerance=tolerance, nan_rows=nan_rows, missed=missed)

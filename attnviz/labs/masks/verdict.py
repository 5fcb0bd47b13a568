"""One verdict per mask: what the mask doctor reads in it and what the leak test sees the model do, side by side.

The doctor reads the mask's cells against what it should be; the leak test
runs the model under it and changes later tokens. Both answer one question
the same way, "does a query see a later token it is meant not to see?", so
they must agree; :class:`Verdict` says whether they do and what each found,
with every query named by its position in the text. What a mask is meant to
keep is the expectation's mask (a bidirectional one lets a query see later
tokens by design: that is no leak), or the mask itself when nothing is said.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.i18n.message import Message, PluralS, msg
from attnviz.labs.masks.doctor import Diagnosis
from attnviz.labs.masks.effects import LeakTest, meant_ends, positions_text

# the doctor's findings that keep a cell the expectation hides (inverted: read the other way, it keeps them)
KEPT_KINDS = ("future_leak", "cross_document", "attends_padding", "under_masked", "inverted")


def doctor_leak_rows(diagnosis: Diagnosis, meant: Tensor, rows: Tensor | None = None) -> list[int]:
    """The positions of the queries for which the doctor reports a kept key after what ``meant`` (bool (T, T))
    lets them reach: the leaks the leak test can see. The diagnosis is of a (T, T) mask or of a step's (q_len, T)
    rows, the last of the text; rows: bool (T,), the rows whose output counts (None: all)."""
    if diagnosis.keep is None or diagnosis.keep.ndim != 2:
        return []
    T = meant.shape[-1]
    q_len = diagnosis.keep.shape[0]
    found = torch.zeros(q_len, T, dtype=torch.bool)
    for problem in diagnosis.problems:
        if problem.kind in KEPT_KINDS and tuple(problem.cells.shape) == (q_len, T):
            found |= problem.cells & diagnosis.keep  # (q_len, T)
    full = torch.zeros(T, T, dtype=torch.bool)
    full[T - q_len :] = found  # a step's rows are the text's last
    late = full & (torch.arange(T)[None, :] > meant_ends(meant)[:, None])  # (T, T): past the meant end
    leaking = late.any(dim=-1) if rows is None else late.any(dim=-1) & rows
    return torch.nonzero(leaking).flatten().tolist()


@dataclass(frozen=True)
class Verdict:
    """The doctor's and the leak test's answers for one mask.

    doctor_rows: positions of the queries the doctor finds seeing a later key they are meant not to see;
    leak_rows: the positions the leak test saw move; tested: whether the leak test had any row to test.
    """

    doctor_rows: list[int]
    leak_rows: list[int]
    tested: bool

    @property
    def doctor_leaks(self) -> bool:
        return bool(self.doctor_rows)

    @property
    def leak_test_leaks(self) -> bool:
        return bool(self.leak_rows)

    @property
    def agree(self) -> bool:
        return self.doctor_leaks == self.leak_test_leaks

    @property
    def leaks(self) -> bool:
        """Whether either finds a leak: a leak either finds is a leak."""
        return self.doctor_leaks or self.leak_test_leaks

    def describe(self) -> Message:
        """One sentence on what the two found together, in Markdown (the doctor's own count comes before it)."""
        doctor = positions_text(self.doctor_rows)
        test = positions_text(self.leak_rows)
        n, m = len(self.doctor_rows), len(self.leak_rows)
        if self.doctor_leaks and self.leak_test_leaks:
            return msg("mask_verdict.both", n=n, s=PluralS(n), doctor=doctor, m=m, s_m=PluralS(m), test=test)
        if self.doctor_leaks:
            return msg("mask_verdict.doctor_only", n=n, s=PluralS(n), doctor=doctor)
        if self.leak_test_leaks:
            return msg("mask_verdict.test_only", m=m, s_m=PluralS(m), test=test)
        return msg("mask_verdict.neither" if self.tested else "mask_verdict.neither_untested")


def verdict(diagnosis: Diagnosis, leak: LeakTest, meant: Tensor, rows: Tensor | None = None) -> Verdict:
    """The doctor's diagnosis and the leak test's result for one mask, judged against ``meant`` (bool (T, T))."""
    return Verdict(doctor_leak_rows(diagnosis, meant, rows), list(leak.leaked_rows), bool(leak.cuts))

"""Every mask the Mask lab can build or read, with what it is checked against, as the page checks it.

Shared by the agreement tests (the doctor and the leak test must agree on each) on the embedded model and on
SmolLM2. A case is one mask and one expectation: the kinds as built (checked against what they were built as
and against the model's own mask), decode steps of 1 and 3 queries at every offset, packed documents causal and
bidirectional with their boundary off by -1, 0 and +1, two custom masks and the gallery's bugs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.core.masks import document_mask
from attnviz.labs.masks.builder import ALIGNS, LabMask, built_mask, custom_mask
from attnviz.labs.masks.doctor import Diagnosis, diagnose, parse_expect
from attnviz.labs.masks.effects import counted_rows, leak_test, meant_keep
from attnviz.labs.masks.gallery import diagnose_bug, gallery
from attnviz.labs.masks.verdict import Verdict, verdict


@dataclass(frozen=True, eq=False)
class Case:
    """One mask as it acts, what the doctor reads, and what it is meant to keep (T, T)."""

    name: str
    acting: Tensor
    diagnosis: Diagnosis
    meant: Tensor
    rows: Tensor | None

    def verdict(self, source, text: str, max_tokens: int) -> Verdict:
        leak = leak_test(source, text, max_tokens, self.acting, self.meant, self.rows)
        return verdict(self.diagnosis, leak, self.meant, self.rows)


def lab_case(name: str, lab: LabMask, expect_text: str | None) -> Case:
    """A lab mask checked against ``expect_text``, as pages/masks.py checks it."""
    expect = parse_expect(expect_text) if expect_text else None
    lengths = lab.lengths if expect is not None and "padding" in expect.kind else None
    diagnosis = diagnose(
        lab.raw, convention=lab.convention, expect=expect, lengths=lengths, side=lab.side, q_len=lab.q_len
    )
    T = lab.acting.shape[-1]
    meant = meant_keep(lab.keep, expect, lengths=lengths, side=lab.side)
    return Case(name, lab.acting, diagnosis, meant, counted_rows(T, lengths, lab.side))


def cases(n_tokens: int, causal: bool) -> list[Case]:
    """Every case for a text of n_tokens tokens on a decoder (``causal``) or an encoder."""
    T = n_tokens
    own = "causal" if causal else None
    halves = [T // 2, T - T // 2]
    built = [
        ("causal", {}),
        ("padding right", {"kind": "padding", "pads": 2}),
        ("padding left", {"kind": "padding", "pads": 2, "side": "left"}),
        ("causal+padding right", {"kind": "causal+padding", "pads": 2}),
        ("causal+padding left", {"kind": "causal+padding", "pads": 2, "side": "left"}),
        ("sliding 3", {"kind": "sliding", "window": 3}),
        ("prefix 3", {"kind": "prefix", "prefix": 3}),
        ("documents causal", {"kind": "document", "documents": halves, "causal": True}),
        ("documents bidirectional", {"kind": "document", "documents": halves, "causal": False}),
    ]
    built += [
        (f"decode q_len {q_len} {align}", {"kind": "decode", "q_len": q_len, "align": align})
        for q_len in (1, 3)
        for align in ALIGNS
    ]
    found = []
    for name, options in built:
        lab = built_mask(options.pop("kind", name), T, **options)
        found.append(lab_case(f"{name} / as built", lab, lab.expect))
        found.append(lab_case(f"{name} / model's own", lab, own))
    for shift in (-1, 0, 1):  # the boundary built one token early or late, against the documents meant
        lengths = [halves[0] + shift, halves[1] - shift]
        for inside in ("causal", "bidirectional"):
            keep = document_mask(lengths, causal=inside == "causal")
            expect = ("" if inside == "causal" else "bidirectional-") + "documents:" + ",".join(map(str, halves))
            found.append(lab_case(f"documents {inside}, boundary {shift:+d}", custom_mask(keep, "keep"), expect))
    one_ahead = torch.ones(T, T, dtype=torch.bool).tril(1)
    found.append(lab_case("custom: one key ahead / causal", custom_mask(one_ahead, "keep"), "causal"))
    found.append(lab_case("custom: one key ahead / nothing", custom_mask(one_ahead, "keep"), None))
    step = torch.ones(3, T, dtype=torch.bool).tril(T - 3 + 1)  # a (3, T) step read from a file, offset + 1
    found.append(lab_case("custom: decode step +1 / causal", custom_mask(step, "keep"), "causal"))
    for bug in gallery(T, causal):
        found.append(
            Case(
                f"gallery: {bug.key}",
                bug.buggy,
                diagnose_bug(bug),
                bug.intended,
                counted_rows(T, bug.lengths, bug.side),
            )
        )
    return found

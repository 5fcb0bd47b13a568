"""Every bug in the gallery is caught by the mask doctor, and every fix passes it."""

import pytest

from attnviz.labs.masks.doctor import diagnose, parse_expect
from attnviz.labs.masks.gallery import gallery


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n_tokens", [2, 9, 16])
def test_the_doctor_finds_every_gallery_bug_and_passes_every_fix(n_tokens, causal):
    for bug in gallery(n_tokens, causal):
        expect = parse_expect(bug.expect)
        found = diagnose(
            bug.raw, convention=bug.convention, expect=expect, lengths=bug.lengths, side=bug.side, q_len=bug.q_len
        )
        assert not found.ok, bug.key
        kinds = {p.kind for p in found.problems}
        assert set(bug.kinds) <= kinds, (bug.key, kinds)
        correct = "additive" if bug.correct.is_floating_point() else "keep"
        fixed = diagnose(bug.correct, convention=correct, expect=expect, lengths=bug.lengths, side=bug.side)
        assert fixed.ok, (bug.key, [(p.kind, p.message) for p in fixed.problems])

"""The estimate against the exact effects head by head, by hand: sign flips and sizes beyond the bound, each with
its reason, and heads too small to compare left out."""

from attnviz.labs.heads_matter.agreement import SIZE_FACTOR, SIZE_FLOOR, HeadDisagreement, head_check


def test_the_bound_is_a_factor_of_two_among_heads_over_five_percent_of_the_largest():
    assert (SIZE_FACTOR, SIZE_FLOOR) == (2.0, 0.05)


def test_agreeing_heads_say_so_with_the_bound():
    # same signs, each within 2x: 0.5/0.4, 0.3/0.2 (1.5x), -0.1/-0.12; None: not run
    check = head_check([[0.5, 0.3], [-0.1, 9.0]], [[0.4, 0.2], [-0.12, None]])
    assert check.disagree == () and check.n_compared == 3
    (said,) = check.messages()
    assert said.key == "estimate_agree.agree"
    assert str(said).startswith("Head by head, the estimate agrees with the exact effect on all 3 heads")
    assert "within a factor of 2" in str(said) and "under 5% of the largest" in str(said)


def test_a_sign_flip_is_flagged_as_one_unless_the_estimate_flagged_the_head():
    estimate = [[0.5, -0.2], [0.3, -0.25]]
    exact = [[0.4, 0.2], [-0.3, 0.2]]
    check = head_check(estimate, exact, saturated=[(1, 0)])
    assert check.disagree == (
        HeadDisagreement(0, 1, -0.2, 0.2, "sign", "sign"),
        HeadDisagreement(1, 0, 0.3, -0.3, "sign", "saturated"),
        HeadDisagreement(1, 1, -0.25, 0.2, "sign", "sign"),
    )
    sign, saturated = check.messages()
    assert sign.key == "estimate_agree.sign" and saturated.key == "estimate_agree.saturated"
    assert str(sign).startswith("**Estimate and exact disagree in sign** on 2 heads the estimate did not flag")
    assert "0.1 (-0.2 / +0.2), 1.1 (-0.25 / +0.2)" in str(sign)
    assert "1.0 (+0.3 / -0.3), as their flag warned" in str(saturated)


def test_over_a_factor_of_two_in_size_is_flagged_and_a_cancelling_head_keeps_its_flag():
    # largest exact 1.0; 0.1 vs 0.3 (3x) is a size flip; 0.05 vs 0.2 (4x) a cancelling head's; 0.45 vs 1.0 is 2.2x
    estimate = [[0.45, 0.3], [0.05, 0.0]]
    exact = [[1.0, 0.1], [0.2, 0.5]]
    check = head_check(estimate, exact, cancelling=[(1, 0)])
    assert [(d.layer, d.head, d.kind, d.reason) for d in check.disagree] == [
        (0, 0, "size", "size"),
        (0, 1, "size", "size"),
        (1, 0, "size", "cancelling"),
        (1, 1, "size", "size"),  # an estimate of 0 for an exact 0.5: infinitely off
    ]
    size, cancelling = check.messages()
    assert "over 2× off the exact effect** on 3 heads" in str(size)
    assert str(cancelling).startswith("Of the heads whose positions cancel, 1 disagree")


def test_heads_too_small_on_both_sides_are_not_compared():
    # largest exact 2.0: the floor is 0.1. 0.01 vs -0.02 flips sign but both are under it; 0.3 vs 0.01 is over it
    check = head_check([[2.0, 0.01, 0.3]], [[2.0, -0.02, 0.01]])
    assert [(d.head, d.kind) for d in check.disagree] == [(2, "size")] and check.n_compared == 3
    assert head_check([[0.1]], [[0.0]]).disagree == ()  # nothing exact moved: no scale to compare on

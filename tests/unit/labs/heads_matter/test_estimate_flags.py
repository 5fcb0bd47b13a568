"""The estimate's flags against exact values, by hand: which heads are wrong (sign, or over the factor), which of them
each flag (saturated, cancelling, GradDrop) caught, which it named in vain; GradDrop's own flag and ranking."""

from attnviz.labs.heads_matter.agreement import FlagHits, flag_report, head_check
from attnviz.labs.heads_matter.attribution import Estimate, graddrop_flags, graddrop_scores

# largest exact |effect| 0.5: the floor is 0.025. (0,0) agrees; (0,1) and (0,2) flip sign; (1,0) is 4× small and
# (1,1) infinitely so; (1,2) is under the floor on both sides (right: within the noise); (1,3) was not run.
ESTIMATE = [[0.5, -0.2, 0.3, 0.0], [0.05, 0.0, 0.01, 0.7]]
EXACT = [[0.4, 0.2, -0.3, 0.0], [0.2, 0.5, 0.011, None]]
FLAGS = {
    "saturated": [(0, 1), (0, 0)],  # one wrong head caught, one right head named
    "cancelling": [(1, 0), (1, 2), (1, 3)],  # one caught, one right (under the floor); (1, 3) not run: not counted
    "graddrop": [(1, 1)],  # one caught
}


def test_each_flag_is_counted_against_the_wrong_heads():
    report = flag_report(ESTIMATE, EXACT, FLAGS)
    assert (report.n_compared, report.n_sign, report.n_size, report.n_wrong) == (7, 2, 2, 4)
    assert report.hits == (FlagHits("saturated", 1, 1), FlagHits("cancelling", 1, 1), FlagHits("graddrop", 1, 0))
    assert report.missed == 1  # (0, 2): a sign flip no flag named
    assert report.to_json() == {
        "compared": 7,
        "sign": 2,
        "size": 2,
        "missed": 1,
        "flags": {
            "saturated": {"caught": 1, "right": 1},
            "cancelling": {"caught": 1, "right": 1},
            "graddrop": {"caught": 1, "right": 0},
        },
    }


def test_the_report_is_one_sentence_with_the_bound():
    said = str(flag_report(ESTIMATE, EXACT, FLAGS).message())
    assert said.startswith("Against the exact values of 7 heads, the estimate is wrong on 4 (2 in sign, 2 over 2× off")
    assert "heads under 5% of the largest exact effect on both sides are within the noise" in said
    assert (
        "the flags caught: saturated 1 (right heads it also named: 1), cancelling 1 (right heads named: 1), "
        "GradDrop 1 (right heads named: 0); 1 no flag named." in said
    )
    assert said.endswith("1 no flag named.")


def test_no_flags_catch_nothing_and_every_wrong_head_is_missed():
    report = flag_report(ESTIMATE, EXACT, {"saturated": [], "cancelling": []})
    assert report.hits == (FlagHits("saturated", 0, 0), FlagHits("cancelling", 0, 0)) and report.missed == 4


def test_the_table_marks_are_the_wrong_heads_and_graddrop_is_a_reason():
    check = head_check(ESTIMATE, EXACT, graddrop=[(1, 1)])
    assert check.marks() == {(0, 1): "sign", (0, 2): "sign", (1, 0): "size", (1, 1): "size"}
    assert [(d.layer, d.head, d.reason) for d in check.disagree if d.reason == "graddrop"] == [(1, 1, "graddrop")]
    said = [str(m) for m in check.messages()]
    assert any(m.startswith("Of the heads GradDrop flagged, 1 disagree") for m in said), said


def test_graddrop_flags_heads_whose_score_is_over_twice_their_estimate_above_the_floor():
    values = [[0.1, 0.5], [0.01, 0.0]]
    scores = [[0.3, 0.6], [0.04, 0.02]]  # largest 0.6, floor 0.03: (1, 1) is under it, (0, 1) within 2×
    assert graddrop_flags(values, scores) == [(0, 0), (1, 0)]
    assert graddrop_flags(values, [[0.0, 0.0], [0.0, 0.0]]) == []


def test_graddrop_scores_average_over_the_other_layers():
    import torch

    sums = [torch.tensor([3.0, 6.0], dtype=torch.float64)] * 4  # 4 layers: each head's sum over 3 non-zero terms
    assert graddrop_scores(sums) == [[1.0, 2.0]] * 4
    assert graddrop_scores(sums, -2.0) == [[0.5, 1.0]] * 4  # a patching estimate's: over |gap|


def test_graddrop_ranks_the_heads_and_flags_them():
    plain = Estimate([[0.1, -0.5], [0.3, 0.0]], 0.1, "1 forward + 1 backward")
    assert [(layer, head) for layer, head, _ in plain.ranked()] == [(0, 1), (1, 0), (0, 0), (1, 1)]
    assert plain.flags() == {"saturated": [], "cancelling": []}
    dropped = Estimate(
        [[0.1, -0.5], [0.3, 0.0]], 0.1, "…", graddrop=[[0.9, 0.4], [0.3, 0.0]], graddrop_flagged=[(0, 0)]
    )
    assert dropped.ranked(2) == [(0, 0, 0.1), (0, 1, -0.5)]  # by GradDrop's score, each with its signed estimate
    assert dropped.flags()["graddrop"] == [(0, 0)]
    assert dropped.to_json()["graddrop_flagged"] == ["0.0"] and "graddrop" not in plain.to_json()

"""The CLI's ``patch --estimate`` text: once the estimate's top heads are confirmed, one line says where it is wrong
and what each flag caught (the JSON keys stay as they were)."""

from attnviz.cli.patch import patch_report
from attnviz.labs.heads_matter.attribution import Estimate
from attnviz.labs.heads_matter.patching import Metric, PatchResult

ESTIMATE = Estimate([[0.5, -0.2], [0.05, 0.3]], 0.1, "1 forward + 1 backward", saturated=[(0, 1)], kind="patch")


def result(effects) -> PatchResult:
    metric = Metric("logit-diff", (" Mary", " John"), (1, 2))
    return PatchResult("tiny", ["a", "b"], ["a", "c"], metric, 1.0, 0.0, effects, 0.1, ESTIMATE)


def test_the_confirmed_estimates_text_says_what_each_flag_caught():
    # exact: (0,0) agrees, (0,1) flips sign (saturated: caught), (1,0) is 4x off (missed); (1,1) not run
    lines = patch_report(result([[0.4, 0.2], [0.2, None]]), [(0, 0), (0, 1), (1, 0)])
    said = [line for line in lines if line.startswith("Against the exact values")]
    assert said == [
        "Against the exact values of 3 heads, the estimate is wrong on 2 (1 in sign, 1 over 2× off; heads under 5% "
        "of the largest exact effect on both sides are within the noise and count as right). Of the 2 wrong heads "
        "the flags caught: saturated 1 (right heads it also named: 0), cancelling 0 (right heads named: 0); 1 no "
        "flag named."
    ]
    value = result([[0.4, 0.2], [0.2, None]]).to_json()
    assert set(value["estimate"]) == {"values", "seconds", "passes", "saturated", "cancelling", "agreement"}


def test_no_exact_values_no_line():
    lines = patch_report(result([[None, None], [None, None]]), [])
    assert not any(line.startswith("Against the exact values") for line in lines)

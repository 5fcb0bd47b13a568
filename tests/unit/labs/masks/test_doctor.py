"""The mask doctor on hand-built masks: each classic bug is found with exact examples, every correct mask passes."""

import pytest
import torch

from attnviz.core.masks import causal_mask, padding_mask, sliding_window_mask
from attnviz.labs.masks.doctor import PROBLEM_KINDS, Expectation, diagnose, expected_keep, parse_expect, parse_lengths

INF = float("-inf")

T_, F_ = True, False

CAUSAL = causal_mask(4)  # (4, 4)

EYE = torch.eye(4, dtype=torch.bool)


def kinds(diagnosis) -> list[str]:
    return [p.kind for p in diagnosis.problems]


def problem(diagnosis, kind):
    return next(p for p in diagnosis.problems if p.kind == kind)


def additive(keep: torch.Tensor, blocked: float = INF, dtype=torch.float32) -> torch.Tensor:
    return torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, blocked)


def real_tokens(lengths, seq_len, side="right"):
    return padding_mask(lengths, seq_len, side=side)[:, 0, 0]  # (B, T)


def test_parse_expect():
    assert parse_expect("causal") == Expectation("causal")
    assert parse_expect(" Causal+Padding ") == Expectation("causal+padding")
    assert parse_expect("sliding:4") == Expectation("sliding", window=4)
    assert parse_expect("prefix:0") == Expectation("prefix", prefix=0)
    assert str(parse_expect("sliding:4")) == "sliding:4"
    for text in ("", "casual", "sliding", "sliding:x", "sliding:0", "prefix:-1", "causal:3"):
        with pytest.raises(ValueError):
            parse_expect(text)
    with pytest.raises(ValueError, match="window goes with 'sliding'"):
        Expectation("causal", window=2)


def test_parse_lengths():
    assert parse_lengths("5,3") == [5, 3]
    for text in ("5,", "a", "5,0", "-1"):
        with pytest.raises(ValueError, match="--lengths"):
            parse_lengths(text)


def test_expected_keep_without_and_with_lengths():
    assert torch.equal(expected_keep(Expectation("causal"), 4), CAUSAL)
    assert torch.equal(expected_keep(Expectation("sliding", window=2), 4), sliding_window_mask(4, 2))
    assert expected_keep(Expectation("prefix", prefix=2), 3).tolist() == [[T_, T_, F_], [T_, T_, F_], [T_, T_, T_]]
    assert expected_keep(Expectation("causal"), 4, batch=3).shape == (3, 4, 4)
    # left padding: the sequence (and its prefix) starts at its first real token
    left = expected_keep(Expectation("prefix", prefix=2), 4, lengths=[3], side="left")[0]
    assert left[1:].tolist() == [[F_, T_, T_, F_], [F_, T_, T_, F_], [F_, T_, T_, T_]]
    # a pad row that the rule leaves with no real key keeps only itself, so no row is fully masked
    left = expected_keep(Expectation("causal+padding"), 3, lengths=[2], side="left")[0]
    assert left.tolist() == [[T_, F_, F_], [F_, T_, F_], [F_, T_, T_]]
    right = expected_keep(Expectation("padding"), 3, lengths=[2], side="right")[0]
    assert right.tolist() == [[T_, T_, F_], [T_, T_, F_], [T_, T_, F_]]  # the pad row keeps the real keys


@pytest.mark.parametrize("text", ["causal", "padding", "causal+padding", "sliding:2", "prefix:3"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_every_correct_batched_mask_passes(text, side):
    expect = parse_expect(text)
    lengths = [6, 4, 1]
    mask = expected_keep(expect, 6, lengths=lengths, side=side)  # (3, 6, 6)
    for convention, stored in (("keep", mask), ("block", ~mask), (None, additive(mask))):
        diagnosis = diagnose(stored, convention=convention, expect=expect, lengths=lengths, side=side)
        assert diagnosis.ok, [p.message for p in diagnosis.problems]


@pytest.mark.parametrize("text", ["causal", "sliding:2", "prefix:3"])
def test_every_correct_single_mask_passes(text):
    expect = parse_expect(text)
    mask = expected_keep(expect, 5)
    assert diagnose(mask, convention="keep", expect=expect).ok
    assert diagnose(additive(mask, torch.finfo(torch.float16).min, torch.float16), expect=expect).ok


def test_a_correct_causal_mask_in_every_convention():
    for mask, convention in ((CAUSAL, "keep"), (~CAUSAL, "block"), (additive(CAUSAL), None)):
        diagnosis = diagnose(mask, convention=convention, expect=Expectation("causal"))
        assert diagnosis.ok and diagnosis.problems == [] and diagnosis.notes == []
        assert torch.equal(diagnosis.keep, CAUSAL) and torch.equal(diagnosis.expected, CAUSAL)
    for blocked in (-1e9, -10000.0, torch.finfo(torch.float32).min):
        assert diagnose(additive(CAUSAL, blocked), expect=Expectation("causal")).ok
    assert diagnose(CAUSAL, convention="keep").ok  # no expectation: structural checks only


def test_upper_triangle_is_a_future_leak_with_exact_examples():
    diagnosis = diagnose(CAUSAL.T, convention="keep", expect=Expectation("causal"))
    assert kinds(diagnosis) == ["future_leak", "over_masked"]
    leak = problem(diagnosis, "future_leak")
    assert leak.count == 6
    assert leak.examples == [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]]
    assert leak.cells.shape == (4, 4) and torch.equal(leak.cells, ~CAUSAL)
    assert "6 cells" in str(leak.message) and "query 0 → key 1" in str(leak.message)

    one = CAUSAL.clone()
    one[1, 3] = True
    diagnosis = diagnose(one, convention="keep", expect=Expectation("causal"))
    assert kinds(diagnosis) == ["future_leak"]
    assert problem(diagnosis, "future_leak").examples == [[1, 3]] and not diagnosis.ok


def test_a_missing_diagonal_leaves_row_0_empty_and_misses_self():
    diagnosis = diagnose(CAUSAL & ~EYE, convention="keep", expect=Expectation("causal"))
    assert kinds(diagnosis) == ["fully_masked_row", "missing_self"]
    empty = problem(diagnosis, "fully_masked_row")
    assert (empty.count, empty.examples) == (1, [[0, -1]])
    assert "row 0" in str(empty.message) and "NaN" in str(empty.message)
    assert empty.cells[0].all() and not empty.cells[1:].any()
    missing = problem(diagnosis, "missing_self")
    assert (missing.count, missing.examples) == (4, [[0, 0], [1, 1], [2, 2], [3, 3]])
    assert "k <= q, not k < q" in str(missing.message)


def test_a_block_mask_read_as_keep_is_inverted():
    for expect in (Expectation("causal"), None):  # with no expectation, against a clean causal mask
        diagnosis = diagnose(~CAUSAL, convention="keep", expect=expect)
        assert kinds(diagnosis) == ["inverted"]
        assert "--convention block" in str(diagnosis.problems[0].message)
        assert diagnosis.problems[0].count == 16
    assert diagnose(~CAUSAL, convention="block", expect=Expectation("causal")).ok
    assert kinds(diagnose(CAUSAL, convention="block")) == ["inverted"]
    window = ~sliding_window_mask(5, 2)
    assert kinds(diagnose(window, convention="keep")) == ["inverted"]


def test_an_additive_mask_with_0_and_inf_swapped_is_inverted():
    diagnosis = diagnose(additive(~CAUSAL), expect=Expectation("causal"))
    assert kinds(diagnosis) == ["inverted"]
    assert "0 and -inf swapped" in str(diagnosis.problems[0].message)


def test_padding_on_query_rows_instead_of_keys_attends_padding():
    lengths = [4, 2]
    real = real_tokens(lengths, 4)
    on_queries = real[:, :, None].expand(2, 4, 4)  # mask[:, :, None] where mask[:, None, :] was meant
    diagnosis = diagnose(on_queries, convention="keep", expect=Expectation("padding"), lengths=lengths)
    assert kinds(diagnosis) == ["fully_masked_row", "attends_padding"]
    pads = problem(diagnosis, "attends_padding")
    assert pads.count == 4 and pads.examples == [[0, 2], [0, 3], [1, 2], [1, 3]]
    assert pads.batch_examples == [1, 1, 1, 1] and pads.cells.shape == (2, 4, 4)
    assert "sequence 1, query 0 → key 2" in str(pads.message) and "--side" not in str(pads.message)  # no side fits it
    empty = problem(diagnosis, "fully_masked_row")
    assert empty.examples == [[2, -1], [3, -1]] and empty.batch_examples == [1, 1]
    assert "padding rows" in str(empty.message)


def test_a_query_broadcast_key_mask_is_detected():
    lengths = [4, 2]
    real = real_tokens(lengths, 4, side="left")
    unexpanded = real[:, :, None]  # (B, T, 1): broadcast over keys instead of queries
    diagnosis = diagnose(unexpanded, convention="keep", lengths=lengths, side="left")
    assert kinds(diagnosis) == ["bad_shape"] and "mask[:, None, :], not mask[:, :, None]" in str(
        diagnosis.problems[0].message
    )
    assert diagnosis.problems[0].cells.shape == (2, 4, 1) and diagnosis.keep is None
    # the same (B, 1, T, 1) pattern, expanded and ANDed with causality, then saved as (B, T, T)
    expanded = real[:, :, None] & CAUSAL
    diagnosis = diagnose(
        expanded, convention="keep", expect=Expectation("causal+padding"), lengths=lengths, side="left"
    )
    assert "attends_padding" in kinds(diagnosis)
    assert problem(diagnosis, "attends_padding").examples == [[2, 0], [2, 1], [3, 0], [3, 1]]


def test_a_key_mask_broadcast_over_queries_is_fine():
    lengths = [4, 2]
    key_mask = real_tokens(lengths, 4)[:, None, :]  # (B, 1, T)
    diagnosis = diagnose(key_mask, convention="keep", expect=Expectation("padding"), lengths=lengths)
    assert diagnosis.ok and diagnosis.keep.shape == (2, 4, 4) and diagnosis.shape == (2, 1, 4)
    assert any("key mask" in str(note) for note in diagnosis.notes)


def test_the_wrong_padding_side_is_named():
    lengths = [4, 2]
    left = expected_keep(Expectation("causal+padding"), 4, lengths=lengths, side="left")
    diagnosis = diagnose(CAUSAL.expand(2, 4, 4), convention="keep", expect=Expectation("causal"), lengths=lengths)
    assert diagnosis.ok  # right padding: a causal mask never reaches the pads after a real query
    diagnosis = diagnose(CAUSAL.expand(2, 4, 4), convention="keep", lengths=lengths, side="left")
    assert kinds(diagnosis) == ["attends_padding"]
    assert problem(diagnosis, "attends_padding").examples == [[2, 0], [2, 1], [3, 0], [3, 1]]
    assert "--side right" in str(problem(diagnosis, "attends_padding").message)
    assert diagnose(left, convention="keep", expect=Expectation("causal+padding"), lengths=lengths, side="left").ok


def test_a_bool_mask_cast_to_float_masks_nothing():
    diagnosis = diagnose(CAUSAL.float(), expect=Expectation("causal"))
    assert diagnosis.convention == "additive"
    assert kinds(diagnosis) == ["future_leak"] and problem(diagnosis, "future_leak").count == 6
    assert any("only 0 and 1" in str(note) and "mask.bool()" in str(note) for note in diagnosis.notes)
    diagnosis = diagnose((~CAUSAL).float(), expect=Expectation("causal"))
    assert any("bool block mask (1 = blocked)" in str(note) for note in diagnosis.notes)


def test_sliding_window_expectations():
    window = Expectation("sliding", window=2)
    diagnosis = diagnose(CAUSAL, convention="keep", expect=window)  # no window at all
    assert kinds(diagnosis) == ["under_masked"]
    assert problem(diagnosis, "under_masked").examples == [[2, 0], [3, 0], [3, 1]]
    assert "q - k >= window" in str(problem(diagnosis, "under_masked").message)
    diagnosis = diagnose(sliding_window_mask(4, 1), convention="keep", expect=window)  # off by one
    assert kinds(diagnosis) == ["over_masked"]
    assert problem(diagnosis, "over_masked").examples == [[1, 0], [2, 1], [3, 2]]


def test_prefix_expectations():
    prefix = Expectation("prefix", prefix=2)
    diagnosis = diagnose(CAUSAL, convention="keep", expect=prefix)  # the prefix is not bidirectional
    assert kinds(diagnosis) == ["over_masked"] and problem(diagnosis, "over_masked").examples == [[0, 1]]
    diagnosis = diagnose(torch.ones(4, 4, dtype=torch.bool), convention="keep", expect=prefix)
    leak = problem(diagnosis, "future_leak")
    assert kinds(diagnosis) == ["future_leak"] and leak.examples == [[0, 2], [0, 3], [1, 2], [1, 3], [2, 3]]
    assert "outside the prefix" in str(leak.message)


def test_over_masked_past_keys():
    mask = CAUSAL.clone()
    mask[3, 1] = False
    diagnosis = diagnose(mask, convention="keep", expect=Expectation("causal"))
    assert kinds(diagnosis) == ["over_masked"] and problem(diagnosis, "over_masked").examples == [[3, 1]]


@pytest.mark.parametrize(
    "shape,lengths,reason",
    [
        ((4, 4), [4, 2], "holds 1 sequence but the lengths 4,2 give 2"),
        ((3, 4, 4), [4, 2], "holds 3 sequences"),
        ((2, 4, 4), [5, 2], "T = 4, shorter than the longest sequence (5)"),
    ],
)
def test_a_mask_that_does_not_fit_the_lengths_is_a_bad_shape(shape, lengths, reason):
    mask = CAUSAL.expand(shape)
    diagnosis = diagnose(mask, convention="keep", expect=Expectation("causal+padding"), lengths=lengths)
    assert kinds(diagnosis) == ["bad_shape"] and reason in str(diagnosis.problems[0].message)
    assert diagnosis.problems[0].count == 1 and diagnosis.problems[0].examples == []


def test_padding_to_a_fixed_length_is_not_a_bad_shape():
    mask = expected_keep(Expectation("causal+padding"), 8, lengths=[5, 3])  # padded past the longest
    assert diagnose(mask, convention="keep", expect=Expectation("causal+padding"), lengths=[5, 3]).ok


def test_notes_for_float16_inf_rows_and_biases():
    fp16 = additive(CAUSAL, dtype=torch.float16)
    fp16[2] = INF  # -1e9 in float16 is -inf: this row is NaN after the softmax
    diagnosis = diagnose(fp16, expect=Expectation("causal"))
    assert "fully_masked_row" in kinds(diagnosis)
    assert any("float16" in str(note) and "finfo(torch.float16).min" in str(note) for note in diagnosis.notes)
    finite = additive(CAUSAL, torch.finfo(torch.float32).min)
    finite[2] = torch.finfo(torch.float32).min
    assert "evenly" in str(problem(diagnose(finite, expect=Expectation("causal")), "fully_masked_row").message)
    biased = additive(CAUSAL)
    biased[3, 0] = -3.0  # an ALiBi-style bias, not a block
    diagnosis = diagnose(biased, expect=Expectation("causal"))
    assert diagnosis.ok and any("bias" in str(note) and "[3, 0]" in str(note) for note in diagnosis.notes)


def test_without_an_expectation_only_structural_problems_count():
    everything = torch.ones(4, 4, dtype=torch.bool)  # an encoder: a causal model's leak, but nothing was stated
    assert diagnose(everything, convention="keep").ok
    nothing = torch.zeros(4, 4, dtype=torch.bool)
    assert kinds(diagnose(nothing, convention="keep")) == ["fully_masked_row"]


def test_convention_inference_and_argument_errors():
    assert diagnose(~CAUSAL, expect=Expectation("causal")).convention == "block"  # inferred from the diagonal
    with pytest.raises(ValueError, match="a float mask is additive"):
        diagnose(additive(CAUSAL), convention="keep")
    with pytest.raises(ValueError, match="needs the real length of each sequence"):
        diagnose(CAUSAL, convention="keep", expect=Expectation("padding"))
    with pytest.raises(ValueError, match="side"):
        diagnose(CAUSAL, convention="keep", side="up")
    with pytest.raises(ValueError, match="bool or floating point"):
        diagnose(CAUSAL.long(), convention="keep")


def test_json_has_exactly_the_contract_keys():
    diagnosis = diagnose(CAUSAL.T, convention="keep", expect=Expectation("causal"))
    out = diagnosis.to_json()
    assert list(out) == ["ok", "convention", "shape", "problems"]
    assert out["ok"] is False and out["convention"] == "keep" and out["shape"] == [4, 4]
    assert [list(p) for p in out["problems"]] == [["kind", "count", "examples"]] * 2
    assert all(p["kind"] in PROBLEM_KINDS for p in out["problems"])


def test_examples_are_capped_at_ten():
    diagnosis = diagnose(torch.ones(30, 30, dtype=torch.bool), convention="keep", expect=Expectation("causal"))
    leak = problem(diagnosis, "future_leak")
    assert leak.count == 30 * 29 // 2 and len(leak.examples) == 10 and leak.examples[-1] == [0, 10]

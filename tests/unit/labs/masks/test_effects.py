"""Masks as they act on real attention: hand-computed softmaxes, the gallery's bugs, and the leak test."""

import math

import pytest
import torch

from attnviz.labs.masks.effects import MASK_CUTS, acting_weights, blocked_by, head_effect, leak_cuts, leak_test
from attnviz.labs.masks.gallery import gallery
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel

TEXT = "The cat sat on the mat because it was tired and then it slept all day long."


def test_acting_weights_by_hand():
    scores = torch.tensor([[0.0, 2.0], [math.log(3.0), 0.0]])
    keep = torch.tensor([[True, False], [True, True]])
    w = acting_weights(scores, keep)
    assert torch.equal(w[0], torch.tensor([1.0, 0.0]))
    assert torch.allclose(w[1], torch.tensor([0.75, 0.25]))
    # the same keep mask cast to float and added hides nothing: row 0 is softmax([1, 2])
    w = acting_weights(scores, keep.float())
    e = math.exp(1.0)
    assert w[0].tolist() == pytest.approx([e / (e + e**2), e**2 / (e + e**2)])


def test_a_row_with_nothing_left_is_nan_and_float16_turns_minus_1e9_into_inf():
    scores = torch.zeros(2, 2)
    hidden_row = torch.tensor([[-1e9, -1e9], [0.0, 0.0]])
    assert torch.isnan(acting_weights(scores, hidden_row.half())[0]).all()  # -1e9 rounds to -inf in float16
    assert acting_weights(scores, hidden_row)[0].tolist() == [0.5, 0.5]  # float32 keeps it finite: uniform
    finfo16 = torch.tensor([[torch.finfo(torch.float16).min] * 2, [0.0, 0.0]], dtype=torch.float16)
    assert acting_weights(scores, finfo16)[0].tolist() == [0.5, 0.5]
    assert torch.isnan(acting_weights(scores, torch.tensor([[False, False], [True, True]]))[0]).all()
    with pytest.raises(TypeError, match="int64"):
        acting_weights(scores, torch.ones(2, 2, dtype=torch.long))
    assert blocked_by(hidden_row).tolist() == [[True, True], [False, False]]


@pytest.mark.parametrize("causal", [True, False])
def test_every_gallery_bug_acts_differently_from_its_fix(causal):
    T = 12
    scores = torch.randn(T, T, generator=torch.Generator().manual_seed(0))
    for bug in gallery(T, causal):
        right, wrong = acting_weights(scores, bug.correct), acting_weights(scores, bug.buggy)
        assert not torch.isnan(right).any(), bug.key  # every fix leaves each row a key
        assert not torch.allclose(right, wrong.nan_to_num(-1.0)), bug.key
        # the fix puts no weight where it means to hide (rows it hides whole are uniform, as Hugging Face's are)
        on_hidden = right.masked_fill(bug.intended, 0.0)[bug.intended.any(-1)]
        assert float(on_hidden.abs().max()) == 0.0, bug.key
        if "fully_masked_row" in bug.kinds:
            assert torch.isnan(wrong).any(-1).any(), bug.key
    with pytest.raises(ValueError, match="at least 2"):
        gallery(1, True)


@pytest.fixture(scope="module")
def causal_model():
    return EmbeddedModel(EmbeddedConfig(d_model=32, n_head=4, n_layer=2, causal=True))


def test_head_effect_of_the_models_own_mask_changes_nothing(causal_model):
    record = causal_model.run(TEXT, 64)
    T = record.q_len
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    effect = head_effect(record, 1, 2, causal, causal)
    assert effect.changed < 1e-6 and effect.leaked == 0.0 and effect.nan_rows == []
    leak = head_effect(record, 1, 2, torch.ones(T, T, dtype=torch.bool), causal)
    assert leak.leaked > 0.01 and leak.changed > 0.01
    nan = head_effect(record, 1, 2, causal.tril(-1), causal)
    assert nan.nan_rows == [0]


def test_the_leak_test_catches_a_one_token_leak_on_the_embedded_model(causal_model):
    T = len(causal_model.encode(TEXT, 64).tokens)
    assert leak_cuts(T) == [T // 4, T // 2, 3 * T // 4]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    clean = leak_test(causal_model, TEXT, 64, causal)
    assert not clean.leaks and clean.max_change == 0.0
    leaky = leak_test(causal_model, TEXT, 64, torch.ones(T, T, dtype=torch.bool).tril(1))  # and the next token
    # every row sees the next token: a cut just after a row catches it; 6 such cuts at most, spread, and the spread
    assert set(leak_cuts(T)) < set(leaky.cuts) and 1 in leaky.cuts and T - 1 in leaky.cuts
    assert len(leaky.cuts) <= MASK_CUTS + len(leak_cuts(T))
    # each of the 2 layers lets a row see one token further: the two rows before each change move, no other
    assert leaky.leaked_rows == sorted({r for c in leaky.cuts for r in (c - 2, c - 1) if r >= 0})
    # the rows no cut tests at once, and that did not move through the second layer either: said, not hidden
    assert leaky.missed == [r for r in range(T - 1) if r + 1 not in leaky.cuts and r + 2 not in leaky.cuts]
    assert math.isnan(leaky.change[T - 1])  # the last row: nothing after it to change
    bool_as_float = leak_test(causal_model, TEXT, 64, causal.float())
    assert bool_as_float.leaked_rows == list(range(T - 1))  # nothing hidden: one cut at the end moves every row


def test_an_upper_triangle_meant_to_be_causal_reports_the_weight_it_puts_on_the_future(causal_model):
    from attnviz.core.capture import head_scores
    from attnviz.labs.masks.doctor import parse_expect
    from attnviz.labs.masks.effects import meant_keep

    record = causal_model.run(TEXT, 64)
    T = record.q_len
    upper = torch.ones(T, T, dtype=torch.bool).triu()  # query i keeps keys i..T-1: the future
    meant = meant_keep(upper, parse_expect("causal"))
    assert torch.equal(meant, torch.ones(T, T, dtype=torch.bool).tril())
    assert meant_keep(upper, None) is upper  # nothing said about what it should be: measured against itself
    # by hand: row i under the upper triangle is softmax over keys i..T-1; every key after i is hidden by causal
    s = head_scores(record.layers[1], 2, (0, T), (0, T)).double()
    by_hand = 0.0
    for i in range(T - 1):
        denom = sum(math.exp(float(s[i, k])) for k in range(i, T))
        by_hand = max(by_hand, max(math.exp(float(s[i, k])) / denom for k in range(i + 1, T)))
    effect = head_effect(record, 1, 2, upper, meant)
    assert effect.leaked == pytest.approx(by_hand, rel=1e-5) and effect.leaked > 1.0 / T
    assert head_effect(record, 1, 2, upper, upper).leaked == 0.0  # the old headline: against the mask itself


def test_one_decode_query_says_which_rows_were_tested_and_why_the_query_was_not(causal_model):
    """Issue 37: with one decode query the leak test said "8 tested rows" and no more."""
    from attnviz.i18n.translate import set_language, tr
    from attnviz.labs.masks.builder import built_mask
    from attnviz.labs.masks.effects import ranges_text

    text = "one two three four five six seven eight nine ten eleven"  # the embedded model: a token a word
    T = len(causal_model.encode(text, 64).tokens)
    step = built_mask("decode", T, q_len=1)
    leak = leak_test(causal_model, text, 64, step.acting)
    assert leak.cuts == leak_cuts(T) == [2, 5, 8] and leak.tested_rows == list(range(8))
    said = str(leak.describe(range(T - 1, T)))
    assert "None of the 8 tested rows moved" in said
    assert "Tested: rows 0–7." in said  # which rows: the cached tokens before every cut
    assert "Not tested: rows 8–9, at or after the last cut (8): the test replaces their own tokens" in said
    assert "Not tested: the decode step's query, row 10." in said and "no later token to see" in said
    plain = str(leak.describe())  # no step named: its row is one more row after the last cut
    assert "Not tested: rows 8–10, at or after the last cut (8)" in plain and "decode" not in plain
    set_language("zh")
    try:
        assert "已测试：第 0–7 行。" in tr(leak.describe(range(T - 1, T)))
    finally:
        set_language("en")
    assert ranges_text([0, 1, 2, 3, 7, 9, 10]) == "0–3, 7, 9–10" and ranges_text([]) == ""

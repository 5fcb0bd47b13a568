"""One verdict per mask (issue 25): the mask doctor and the leak test agree on every mask the lab builds or reads."""

import pytest
import torch

from attnviz.core.masks import causal_mask
from attnviz.i18n.message import PluralS
from attnviz.i18n.translate import t
from attnviz.labs.masks.builder import built_mask, decode_note
from attnviz.labs.masks.doctor import Expectation, diagnose, parse_expect
from attnviz.labs.masks.effects import leak_test, meant_keep, suspect_cuts, suspects
from attnviz.labs.masks.verdict import verdict
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from tests.unit.labs.masks.mask_cases import cases

TEXT = "The cat sat on the mat because it was tired."  # 11 tokens: each leak test is a few runs of a small model


@pytest.fixture(scope="module", params=[True, False], ids=["decoder", "encoder"])
def model(request):
    return EmbeddedModel(EmbeddedConfig(d_model=32, n_head=4, n_layer=2, causal=request.param))


def test_the_doctor_and_the_leak_test_agree_on_every_mask(model):
    T = len(model.encode(TEXT, 64).tokens)
    table, leaking = [], 0
    for case in cases(T, model.causal):
        found = case.verdict(model, TEXT, 64)
        table.append(f"{case.name:45} doctor {found.doctor_rows!s:24} leak test {found.leak_rows}")
        assert found.agree, table[-1]
        leaking += found.leaks
    print(f"\n{'decoder' if model.causal else 'encoder'} (T = {T}):\n" + "\n".join(table))
    assert leaking >= 10  # and not by both finding nothing: the leaky masks are among them


def test_a_decode_step_off_by_one_leaks_and_both_name_the_queries_by_position(model):
    """The issue's case: 3 queries over the text, the offset one too large; the leak test said nothing moved."""
    T = len(model.encode(TEXT, 64).tokens)
    lab = built_mask("decode", T, q_len=3, align="plus_one")
    old_call = leak_test(model, TEXT, 64, lab.acting)  # as the page called it: judged against causal
    assert old_call.leaks and old_call.leaked_rows == [T - 3, T - 2]  # the first two queries see the next token
    assert {T - 2, T - 1} <= set(old_call.cuts)  # just after each of them
    expect = parse_expect(lab.expect)
    diagnosis = diagnose(lab.raw, convention="keep", expect=expect, q_len=3)
    assert f"query {T - 3} → key {T - 2}" in str(diagnosis.problems[0].message)  # a position, as the figure's rows
    found = verdict(diagnosis, old_call, meant_keep(lab.keep, expect))
    assert found.doctor_rows == found.leak_rows == [T - 3, T - 2]
    assert f"at positions {T - 3}, {T - 2}" in str(found.describe())
    assert decode_note(lab) is not None and "the other 2 rows each see a later token" in str(decode_note(lab))


def test_one_query_off_by_one_leaks_nothing_at_the_end_of_the_text_and_the_page_says_why(model):
    T = len(model.encode(TEXT, 64).tokens)
    lab = built_mask("decode", T, q_len=1, align="plus_one")
    assert torch.equal(lab.raw, built_mask("decode", T, q_len=1).raw)  # the same row as the right mask
    note = str(decode_note(lab))
    assert f"Built with offset {T}" in note and f"would also see key {T}" in note and "nothing leaks" in note
    assert "2 or more queries" in note  # and where the same mask does leak
    assert decode_note(built_mask("decode", T, q_len=3)) is None and decode_note(built_mask("causal", T)) is None
    assert not leak_test(model, TEXT, 64, lab.acting).leaks


def test_packed_documents_on_an_encoder_are_checked_against_what_they_were_built_as():
    """The issue's second case: "No problem found" beside red leak-test bars, on the bidirectional model."""
    encoder = EmbeddedModel(EmbeddedConfig(d_model=32, n_head=4, n_layer=2, causal=False))
    T = len(encoder.encode(TEXT, 64).tokens)
    lab = built_mask("document", T, documents=[5, T - 5], causal=False)
    expect = parse_expect(lab.expect)  # bidirectional-documents:5,6
    meant = meant_keep(lab.keep, expect)
    leak = leak_test(encoder, TEXT, 64, lab.acting, meant)
    assert not leak.leaks and leak.cuts == [5, 8]  # the boundary, and the spread's cut that tests document 0
    assert leak.tested_rows == list(range(5))  # the first document must not see the second; the second sees itself
    leaky = built_mask("document", T, documents=[6, T - 6], causal=False)  # the boundary built one token late
    diagnosis = diagnose(leaky.raw, convention="keep", expect=expect)
    # token 5 is in the second document: it sees the first (cross_document), and not the rest of its own
    assert [p.kind for p in diagnosis.problems] == ["cross_document", "over_masked"]
    found = verdict(diagnosis, leak_test(encoder, TEXT, 64, leaky.acting, meant), meant)
    assert found.doctor_rows == found.leak_rows == list(range(5)) and found.agree  # they see token 5; it sees back


def test_a_mask_meant_to_see_everything_has_nothing_to_test():
    encoder = EmbeddedModel(EmbeddedConfig(d_model=32, n_head=4, n_layer=2, causal=False))
    T = len(encoder.encode(TEXT, 64).tokens)
    every = torch.ones(T, T, dtype=torch.bool)
    leak = leak_test(encoder, TEXT, 64, every, meant=every)
    assert leak.cuts == [] and not leak.leaks and "nothing to test" in str(leak.describe())


def test_cuts_fall_just_after_each_row_that_sees_past_what_it_is_meant_to():
    T = 12
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    step = built_mask("decode", T, q_len=3, align="plus_one")
    assert suspects(step.keep, causal) == {9: (10, 10), 10: (11, 11)}
    assert suspect_cuts(suspects(step.keep, causal).values()) == [10, 11]
    upper = torch.ones(T, T, dtype=torch.bool).triu()
    assert suspect_cuts(suspects(upper, causal).values()) == [T - 1]  # one cut at the end catches every row
    prefix = built_mask("prefix", T, prefix=4).keep
    assert suspects(prefix, causal) == {r: (r + 1, 3) for r in range(3)}  # meant causal: the prefix leaks
    assert suspects(prefix, prefix) == {}  # meant a prefix-LM: nothing leaks
    assert suspect_cuts([(r + 1, r + 1) for r in range(20)], most=3) == [1, 11, 20]  # more needed: spread


def test_problems_are_counted_in_words():
    assert t("masks.problems", n=1, s=PluralS(1), convention="keep", shape=[3, 8]).startswith("1 problem in")
    assert t("masks.problems", n=2, s=PluralS(2), convention="keep", shape=[3, 8]).startswith("2 problems in")


def test_at_two_tokens_the_note_asks_for_no_second_query_and_a_cache_of_one_token_is_singular():
    two, five = (
        str(decode_note(built_mask("decode", 2, q_len=1, align="plus_one"))),
        str(decode_note(built_mask("decode", 5, q_len=1, align="plus_one"))),
    )
    assert "raise the queries" not in two and "1 token in the cache" in two  # two tokens allow one query only
    assert "(raise the queries to 2)" in five and "4 tokens in the cache" in five
    diagnosis = diagnose(causal_mask(1, 2, offset=1), convention="keep", expect=Expectation("causal"), q_len=1)
    assert "a KV cache of 1 token;" in " ".join(map(str, diagnosis.notes))

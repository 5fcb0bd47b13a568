"""The Mask lab on real models: the leak test, states under a mask, and the page with every bundled model."""

from pathlib import Path

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from attnviz.labs.masks.effects import leak_test
from attnviz.labs.masks.gallery import gallery
from tests.plotly_json import decode, spec_of

ROOT = Path(__file__).resolve().parents[3]
TEXT = "The cat sat on the mat because it was tired, and then it slept in the warm sun all afternoon."


def test_states_under_the_models_own_mask_are_the_models_states(smollm2):
    record = smollm2.run(TEXT, 64)
    T = record.q_len
    states = smollm2.states_under_mask(TEXT, 64, torch.ones(T, T, dtype=torch.bool).tril())
    assert states.shape == record.outputs.hidden.shape
    assert torch.allclose(states, record.outputs.hidden, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match=f"must be \\({T}, {T}\\)"):
        smollm2.states_under_mask(TEXT, 64, torch.ones(T + 1, T + 1, dtype=torch.bool))
    with pytest.raises(TypeError, match="int64"):
        smollm2.states_under_mask(TEXT, 64, torch.ones(T, T, dtype=torch.long))


def test_the_leak_test_catches_leaks_on_smollm2(smollm2):
    T = len(smollm2.encode(TEXT, 64).ids)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    clean = leak_test(smollm2, TEXT, 64, causal)
    assert not clean.leaks and clean.max_change == 0.0
    one_ahead = leak_test(smollm2, TEXT, 64, torch.ones(T, T, dtype=torch.bool).tril(1))
    # a cut at the end, and 30 layers each reaching one token further: every row but the last moves
    assert T - 1 in one_ahead.cuts and one_ahead.leaked_rows == list(range(T - 1))
    assert leak_test(smollm2, TEXT, 64, causal.float()).leaks  # a bool mask cast to float and added hides nothing


def test_the_encoder_under_a_causal_mask_does_not_leak(minilm):
    T = len(minilm.encode(TEXT, 64).ids)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    assert not leak_test(minilm, TEXT, 64, causal).leaks
    every = torch.ones(T, T, dtype=torch.bool)  # its own mask: every key, by design
    assert leak_test(minilm, TEXT, 64, every).leaked_rows == list(range(T - 1))  # judged against causal: leaks
    assert leak_test(minilm, TEXT, 64, every, meant=every).cuts == []  # judged against itself: nothing to test


def page(model: str, text: str = TEXT) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.selectbox(key="model").set_value(model).run()
    at.text_area(key="text").input(text).run()
    at.switch_page("pages/masks.py").run()
    assert not at.exception, at.exception
    return at


@pytest.mark.parametrize("model", ["default", "minilm", "smollm2"])
def test_the_page_with_every_bundled_model(model):
    at = page(model)
    charts = at.get("plotly_chart")
    assert len(charts) == 8  # mask, without, with, difference, one query row, leak test, the bug's fix and the bug
    assert at.success and "No problem found" in at.success[0].value  # the causal default is what the model expects
    table = at.dataframe[0].value
    bugs = gallery(8, causal=True)
    assert list(table["bug"]) == [str(b.title) for b in bugs]
    assert (table["the doctor finds"] != "").all()  # the doctor catches every bug

    at.selectbox(key="mask_kind").set_value("sliding").run()
    at.number_input(key="mask_w").set_value(2).run()
    assert not at.exception
    mask = decode(spec_of(at.get("plotly_chart")[0])["data"][0]["z"])
    T = mask.shape[0]
    assert np.array_equal(mask, np.tril(np.ones((T, T), dtype=np.uint8)) - np.tril(np.ones((T, T), np.uint8), -2))

    # a future leak: the doctor reports it and marks it, and the leak test moves earlier rows
    at.selectbox(key="mask_kind").set_value("prefix").run()
    at.number_input(key="mask_prefix").set_value(T).run()
    at.radio(key="mask_meant").set_value("custom").run()
    at.text_input(key="mask_expect_text").input("causal").run()
    assert not at.exception
    assert any("future_leak" in m.value for m in at.markdown)
    names = [t.get("name", "") for t in spec_of(at.get("plotly_chart")[0])["data"]]
    assert any(n.startswith("future_leak") for n in names)
    assert any("query rows moved" in m.value for m in at.markdown)
    assert at.error and "The leak test confirms it" in at.error[0].value  # one verdict: the doctor and the test


def test_bad_settings_and_a_short_text_get_a_message():
    at = page("default", "Hi")
    assert not at.exception and any("at least two tokens" in i.value for i in at.info)
    at = page("default")
    at.selectbox(key="mask_kind").set_value("document").run()
    keys = [w.key for w in at.text_input if w.key and w.key.startswith("mask_docs_")]
    at.text_input(key=keys[0]).input("3, x").run()
    assert not at.exception and any("Invalid mask: document lengths '3, x'" in e.value for e in at.error)
    at.text_input(key=keys[0]).input("3, 3").run()
    assert not at.exception and any("add up to 6" in e.value for e in at.error)


def problem_markers(at) -> list[str]:
    return [t.get("name", "") for t in spec_of(at.get("plotly_chart")[0])["data"][1:]]


def test_the_lab_builds_and_checks_a_decode_step_and_packed_documents():
    at = page("default")
    at.selectbox(key="mask_kind").set_value("decode").run()  # checked against what it was built as, by default
    assert not at.exception, at.exception
    assert at.radio(key="mask_meant").value == "built"
    T = decode(spec_of(at.get("plotly_chart")[0])["data"][0]["z"]).shape[0]
    assert at.success and "No problem found" in at.success[0].value and f"[1, {T}]" in at.success[0].value
    assert any(f"the doctor checks the (1, {T}) mask" in c.value for c in at.caption)

    at.number_input(key="mask_q_len").set_value(3).run()
    at.radio(key="mask_align").set_value("plus_one").run()  # the KV-cache offset one too large
    assert not at.exception, at.exception
    # rows named by position, as the figure names them: the step's first query is token T - 3
    assert any("**future_leak** (2)" in m.value and f"query {T - 3} → key {T - 2}" in m.value for m in at.markdown)
    assert problem_markers(at) == ["future_leak (2)"]  # drawn on the text's last three rows
    verdict = at.error[0].value  # the doctor's finding and the leak test's, in one box
    assert "1 problem in" in verdict and "The leak test confirms it" in verdict and f"{T - 3}, {T - 2}" in verdict
    assert any("**2 query rows moved**" in m.value for m in at.markdown)
    assert any("the other 2 rows each see a later token" in i.value for i in at.info)
    assert any("causal with offset" in c.value for c in at.caption)

    at.radio(key="mask_align").set_value("top_left").run()
    assert not at.exception and problem_markers(at)[0] == "missing_self (3)"
    assert any("top-left" in c.value for c in at.caption)

    at.number_input(key="mask_q_len").set_value(1).run()
    at.radio(key="mask_align").set_value("plus_one").run()  # one query: the extra key lies past the text
    assert not at.exception and at.success and "No problem found" in at.success[0].value
    assert any(f"Built with offset {T}" in i.value and "nothing leaks at this step" in i.value for i in at.info)
    leak = next(m.value for m in at.markdown if "Every layer attends under this mask" in m.value)
    assert "Tested: rows 0–" in leak and f"Not tested: the decode step's query, row {T - 1}." in leak  # which, why

    at.selectbox(key="mask_kind").set_value("document").run()  # an encoder: two bidirectional documents, as built
    assert not at.exception and at.success and "No problem found" in at.success[0].value
    assert "The leak test agrees" in at.success[0].value  # it tests the first document against the second
    assert any("bidirectional-documents:" in c.value for c in at.caption)
    at.selectbox(key="mask_kind").set_value("causal").run()
    at.radio(key="mask_meant").set_value("custom").run()
    at.text_input(key="mask_expect_text").input(f"documents:{T // 2},{T - T // 2}").run()
    assert not at.exception, at.exception
    assert any("**cross_document**" in m.value and "document 1 → document 0" in m.value for m in at.markdown)
    assert problem_markers(at)[0].startswith("cross_document")

    table = at.dataframe[0].value
    finds = dict(zip(table["bug"], table["the doctor finds"], strict=True))
    assert finds["Packed documents see each other"] == "cross_document"
    assert finds["Off by one in the KV-cache offset"] == "future_leak"


def test_the_issues_decode_step_on_smollm2_leaks_for_both(smollm2):
    """Issue 25: 3 queries over the text, the offset one too large; the leak test said "No earlier row moved"."""
    from attnviz.labs.masks.builder import built_mask
    from attnviz.labs.masks.doctor import diagnose, parse_expect
    from attnviz.labs.masks.effects import meant_keep
    from attnviz.labs.masks.verdict import verdict

    text = "The cat sat on the mat."
    T = len(smollm2.encode(text, 64).ids)
    lab = built_mask("decode", T, q_len=3, align="plus_one")
    leak = leak_test(smollm2, text, 64, lab.acting)  # as the page called it before: every later token hidden
    assert leak.leaked_rows == [T - 3, T - 2]
    expect = parse_expect(lab.expect)
    found = verdict(diagnose(lab.raw, convention="keep", expect=expect, q_len=3), leak, meant_keep(lab.keep, expect))
    assert found.doctor_rows == found.leak_rows == [T - 3, T - 2]
    right = built_mask("decode", T, q_len=3)
    assert not leak_test(smollm2, text, 64, right.acting).leaks


@pytest.mark.parametrize(("text", "n"), [("Hi there", 2), (" ".join(["word"] * 400), 128)])
def test_the_lab_at_two_tokens_and_at_its_longest(text, n):
    at = page("default", text)
    at.selectbox(key="mask_kind").set_value("decode").run()
    at.radio(key="mask_align").set_value("plus_one").run()
    assert not at.exception, at.exception
    rows = decode(spec_of(at.get("plotly_chart")[0])["data"][0]["z"]).shape[0]
    assert rows == n and at.success and "No problem found" in at.success[0].value  # one query: nothing past the end
    at.selectbox(key="mask_kind").set_value("document").run()
    assert not at.exception and at.success, [e.value for e in at.error]
    if n > 2:
        at.selectbox(key="mask_kind").set_value("decode").run()
        at.number_input(key="mask_q_len").set_value(3).run()
        at.radio(key="mask_align").set_value("plus_one").run()  # the widget was gone: back to bottom-right
        assert not at.exception and at.error and "The leak test confirms it" in at.error[0].value

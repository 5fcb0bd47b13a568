"""The Mask lab on real models: the leak test, states under a mask, and the page with every bundled model."""

from pathlib import Path

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from attnviz.labs.masks.effects import leak_cuts, leak_test
from attnviz.labs.masks.gallery import gallery
from tests.plotly_json import decode, spec_of

ROOT = Path(__file__).resolve().parents[2]
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
    # 30 layers each reach one token further: every tested row moves
    assert one_ahead.leaked_rows == list(range(max(leak_cuts(T))))
    assert leak_test(smollm2, TEXT, 64, causal.float()).leaks  # a bool mask cast to float and added hides nothing


def test_the_encoder_under_a_causal_mask_does_not_leak(minilm):
    T = len(minilm.encode(TEXT, 64).ids)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    assert not leak_test(minilm, TEXT, 64, causal).leaks
    own = leak_test(minilm, TEXT, 64, torch.ones(T, T, dtype=torch.bool))  # its own mask: every key, by design
    assert own.leaked_rows == list(range(max(leak_cuts(T))))


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
    assert any("earlier rows moved" in m.value for m in at.markdown)


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
    at.selectbox(key="mask_kind").set_value("decode").run()
    at.radio(key="mask_meant").set_value("built").run()  # the embedded model is an encoder: check what was built
    assert not at.exception, at.exception
    T = decode(spec_of(at.get("plotly_chart")[0])["data"][0]["z"]).shape[0]
    assert at.success and "No problem found" in at.success[0].value and f"[1, {T}]" in at.success[0].value
    assert any(f"the doctor checks the (1, {T}) mask" in c.value for c in at.caption)

    at.number_input(key="mask_q_len").set_value(3).run()
    at.radio(key="mask_align").set_value("plus_one").run()  # the KV-cache offset one too large
    assert not at.exception, at.exception
    assert any("**future_leak** (2)" in m.value and "query 0 → key" in m.value for m in at.markdown)
    assert problem_markers(at) == ["future_leak (2)"]  # drawn on the text's last three rows
    assert any("causal with offset" in c.value for c in at.caption)

    at.radio(key="mask_align").set_value("top_left").run()
    assert not at.exception and problem_markers(at)[0] == "missing_self (3)"
    assert any("top-left" in c.value for c in at.caption)

    at.selectbox(key="mask_kind").set_value("document").run()  # two documents, block-diagonal causal: as built
    assert not at.exception and at.success and "No problem found" in at.success[0].value
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

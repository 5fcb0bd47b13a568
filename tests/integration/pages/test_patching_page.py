"""The Patching page through AppTest: two texts on SmolLM2 (the estimate at once, the top heads confirmed with a
click, every head patched exactly), the direct logit tab and its sum check, an encoder's metric, bad input in one
line; and the Ablation page's estimate on SmolLM2 within the time the issue asks."""

import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[3]
CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


def open_page(model: str, text: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.selectbox(key="model").set_value(model).run()
    at.text_area(key="text").input(text).run()
    at.switch_page("pages/patching.py").run()
    assert not at.exception, at.exception
    return at


def test_two_texts_on_smollm2():
    at = open_page("smollm2", CLEAN)
    at.text_area(key="patch_corrupt").input(CORRUPT).run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    # each text's most likely next token are the defaults: the clean text's answer against the corrupted one's
    assert (at.text_input(key="patch_token_a").value, at.text_input(key="patch_token_b").value) == (" Mary", " John")
    values = {m.label: m.value for m in at.metric}
    assert float(values["Metric, clean"]) > 0 > float(values["Metric, corrupted"])
    charts = [chart.key for chart in at.get("plotly_chart")]
    assert "patch_estimate_map" in charts and "patch_exact_map" not in charts
    ranked = at.dataframe[0].value
    assert len(ranked) == 10 and ranked.iloc[0, 0] == 23 and ranked.iloc[0, 1] == 3  # the name mover, estimated
    at.button(key="patch_confirm").click().run()
    assert not at.exception, at.exception
    assert "patch_exact_map" in [chart.key for chart in at.get("plotly_chart")]
    ranked = at.dataframe[0].value
    assert ranked.iloc[:, 3].notna().all()  # the top 10, confirmed exactly
    assert any("Spearman" in info.value for info in at.info)
    assert at.button(key="patch_start").label.startswith("Patch every head exactly (270 heads, about ")
    assert "dla_map" not in [chart.key for chart in at.get("plotly_chart")]  # a closed tab computes nothing
    # the direct logit tab: the last position, the model's top token, the sum checked
    at.radio(key="patching_tab").set_value("patching.tab_logits").run()
    assert "patch_estimate_map" not in [chart.key for chart in at.get("plotly_chart")]
    caption = next(c.value for c in at.caption if "the model's logit" in c.value)
    assert "The heads together" in caption and "RMSNorm" in caption
    assert "dla_map" in [chart.key for chart in at.get("plotly_chart")]
    at.text_input(key="dla_token").input("Marylebone").run()
    assert [e.value for e in at.error][-1].startswith("'Marylebone' is not one token")


def test_bad_input_and_other_models():
    at = open_page("smollm2", CLEAN)
    at.text_area(key="patch_corrupt").input("When Mary and John went").run()
    assert not at.exception and "patching needs the same length" in at.error[0].value
    at = open_page("default", "the cat sat on the mat")
    assert at.text_area(key="patch_corrupt").value == "the dog sat on the mat"  # proposed from the sidebar's
    at.text_area(key="text").input("a cat sat on the mat").run()
    assert at.text_area(key="patch_corrupt").value == "a dog sat on the mat"  # follows it, until edited
    at.text_area(key="patch_corrupt").input("the cow sat on the mat").run()
    at.text_area(key="text").input("the cat sat on the mat").run()
    assert at.text_area(key="patch_corrupt").value == "the cow sat on the mat"  # once edited, it is the reader's
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("cosine distance" in c.value for c in at.caption)  # no LM head: the hidden states' distance
    assert "patch_estimate_map" in [chart.key for chart in at.get("plotly_chart")]
    at.radio(key="patching_tab").set_value("patching.tab_logits").run()
    assert any("no LM head" in i.value for i in at.info)  # the logit tab says why it has nothing to attribute


def test_the_first_screen_starts_alive():
    """Issue 37: the reader's own text with two names opens on a corrupted text proposed from it (the repeated name
    swapped, said so), each text's answer as the tokens, and something to restore; one head patched position by
    position draws a bar a token. A text with no swap opens on the built-in example pair, and says so."""
    from attnviz.labs.heads_matter import corruption

    clean = "When Alice and Bob went to the park, Bob gave a ball to"
    at = open_page("smollm2", clean)
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert at.text_area(key="patch_corrupt").value == "When Alice and Bob went to the park, Alice gave a ball to"
    assert any("the last “Bob” became “Alice”" in i.value for i in at.info), [i.value for i in at.info]
    token_a, token_b = at.text_input(key="patch_token_a").value, at.text_input(key="patch_token_b").value
    assert token_a != token_b
    values = {m.label: m.value for m in at.metric}
    assert float(values["Gap"]) != 0 and not any("nothing to restore" in i.value for i in at.info)
    assert "patch_estimate_map" in [chart.key for chart in at.get("plotly_chart")]
    at.button(key="patch_positions_start").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    charts = {chart.key: chart for chart in at.get("plotly_chart")}
    assert "patch_positions_map" in charts
    at.text_area(key="text").input("The weather is nice today.").run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert at.text_area(key="patch_corrupt").value == corruption.EXAMPLE_CORRUPT
    assert any("built-in example" in i.value for i in at.info), [i.value for i in at.info]
    assert float({m.label: m.value for m in at.metric}["Gap"]) != 0


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_the_ablation_pages_estimate_on_smollm2_is_quick(mode):
    """Issue 29: on ≤ 32 tokens SmolLM2's estimate for every head appears within 10 s here (the page's whole run,
    the model already loaded)."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.selectbox(key="model").set_value("smollm2").run()
    at.text_area(key="text").input("The cat sat on the mat because it was warm, and the dog slept by the door.").run()
    at.switch_page("pages/overview.py").run()
    start = time.perf_counter()
    at.switch_page("pages/ablation.py").run()
    if mode != "zero":
        at.radio(key="ablation_mode").set_value(mode).run()
    assert not at.exception, at.exception
    assert "ablation_estimate_map" in [chart.key for chart in at.get("plotly_chart")]
    assert time.perf_counter() - start < 60  # a loose bound for a busy CI machine; the 10 s figure is the benchmark's
    assert at.button(key="ablation_confirm")
    at.button(key="ablation_confirm").click().run()
    assert not at.exception and any("confirmed exactly" in c.value for c in at.caption)


def test_a_model_that_scales_without_a_module_says_so_on_the_direct_logit_tab(tmp_path, smollm2):
    """A Granite folder whose attention output joins the stream × 0.22 and whose logits are its LM head's ÷ 8:
    the tab says both were found and applied, and the sum check holds (no warning)."""
    from transformers import GraniteConfig, GraniteForCausalLM

    from tests.integration.tiny_models import tiny

    folder = tiny(
        tmp_path / "granite", smollm2, GraniteConfig, GraniteForCausalLM, residual_multiplier=0.22, logits_scaling=8.0
    )
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.text_area(key="text").input(CLEAN).run()
    at.selectbox(key="model").set_value("path").run()
    at.text_input(key="model_path").input(str(folder)).run()
    at.switch_page("pages/patching.py").run()
    at.radio(key="patching_tab").set_value("patching.tab_logits").run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    infos = [info.value for info in at.info]
    assert any("attention output by 0.22 on its way into the residual stream" in i for i in infos), infos
    assert any("on the way to its logits by 0.125 in all" in i for i in infos), infos
    assert not any("frozen-scale reading misses" in w.value for w in at.warning)

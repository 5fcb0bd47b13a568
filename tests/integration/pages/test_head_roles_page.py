"""The Head roles page driven through AppTest, with the embedded default and SmolLM2."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from attnviz.app.loading import result_cache
from attnviz.labs import head_roles
from attnviz.labs.head_roles import rules as role_rules
from tests.integration.tiny_models import tiny
from tests.plotly_json import spec_of

ROOT = Path(__file__).resolve().parents[3]
PAGE = "pages/head_roles.py"


def app(model: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.selectbox(key="model").set_value(model).run()
    at.text_area(key="text").input("The cat sat on the mat because it was tired. 猫坐着。").run()
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    return at


@pytest.mark.parametrize("model", ["default", "smollm2"])
def test_head_roles_page(model):
    at = app(model)
    charts = at.get("plotly_chart")
    assert len(charts) == 2  # the role map and the similarity matrix
    roles, similarity = (spec_of(c) for c in charts)
    assert roles["data"][0]["type"] == "heatmap" and similarity["data"][0]["type"] == "heatmap"
    assert not any("not available" in i.value for i in at.info)
    # under a second even on SmolLM2 (one pass, each layer rerun once): outputs measured on every run
    assert any("output_share" in c.value for c in at.caption)
    assert not at.get("toggle") or "roles_dead" not in [t.key for t in at.toggle]

    at.toggle(key="roles_stability").set_value(True).run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    at.toggle(key="roles_sink").set_value(True).run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    at.multiselect(key="roles_lengths").set_value([64, 128]).run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    charts = at.get("plotly_chart")
    assert len(charts) == 4
    sink = spec_of(charts[3])
    assert sink["data"][0]["name"] == "L0 mean"
    assert any("about" in c.value and "8,192 tokens on SmolLM2" in c.value for c in at.caption)


def test_the_threshold_slider_changes_the_groups():
    at = app("default")
    at.slider(key="roles_threshold").set_value(1.0).run()
    assert not at.exception
    shapes = spec_of(at.get("plotly_chart")[1])["layout"].get("shapes", [])
    assert len(shapes) == 1  # at distance 1 every head is in one group


def test_the_dead_role_shows_in_the_table_and_the_map(monkeypatch):
    monkeypatch.setattr(role_rules, "DEAD_OUTPUT_SHARE", 10.0)  # every head is "dead": the page must say so
    result_cache().clear()  # roles cached by another test were labelled under the real threshold
    at = app("default")
    table = at.dataframe[0].value
    assert (table["role"] == "dead").all() and table["output_share"].notna().all()
    legend = [t["name"] for t in spec_of(at.get("plotly_chart")[0])["data"][1:]]
    assert legend == [f"dead ({len(table)})"]


def test_stability_over_my_own_prompts():
    at = app("default")
    at.radio(key="roles_prompt_source").set_value("my prompts").run()
    assert not at.exception
    prompts = "\n".join(["The cat sat on the mat.", "", "   ", *[f"Prompt number {i} is here." for i in range(9)]])
    at.text_area(key="roles_prompts").input(prompts).run()
    assert any("2 more line(s) ignored" in w.value for w in at.warning)  # 10 prompts, 8 read; blank lines dropped
    assert any("At most 8 prompts" in c.value for c in at.caption)
    at.toggle(key="roles_stability").set_value(True).run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert "8 prompt(s)" in at.toggle(key="roles_stability").label
    assert len(at.get("plotly_chart")) == 3

    at.text_area(key="roles_prompts").input("\n\n").run()
    assert any("at least one prompt" in i.value for i in at.info)
    assert len(at.get("plotly_chart")) == 2


def test_a_slow_sink_selection_waits_for_the_button(monkeypatch):
    monkeypatch.setattr(head_roles, "SINK_CONFIRM_SECONDS", 0.0)  # every selection is slow (the page reads it here)
    result_cache().clear()  # a result cached by another test would be shown without asking
    at = app("default")
    at.toggle(key="roles_sink").set_value(True).run()
    at.multiselect(key="roles_lengths").set_value([64, 128]).run()
    assert not at.exception and not at.error
    assert len(at.get("plotly_chart")) == 2  # nothing ran yet
    assert any("This takes about" in w.value for w in at.warning)
    at.button(key="roles_sink_run").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert len(at.get("plotly_chart")) == 3
    at.slider(key="roles_threshold").set_value(0.5).run()  # a later rerun keeps the result: it is cached
    assert len(at.get("plotly_chart")) == 3


def test_a_model_without_outputs_says_the_dead_role_is_not_available(smollm2, tmp_path):
    from transformers import Gemma2Config, Gemma2ForCausalLM

    folder = tiny(tmp_path / "gemma2", smollm2, Gemma2Config, Gemma2ForCausalLM, head_dim=16, sliding_window=4)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.selectbox(key="model").set_value("path").run()
    at.text_input(key="model_path").input(str(folder)).run()
    at.switch_page(PAGE).run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert any("dead* role is not available" in i.value and "gemma2" in i.value for i in at.info)
    assert (at.dataframe[0].value["role"] != "dead").all()
    assert len(at.get("plotly_chart")) == 2


def test_finding_dead_heads_on_a_large_model_waits_to_be_asked(monkeypatch):
    monkeypatch.setattr(role_rules, "OUTPUT_AUTO_MACS", 0)  # as a local 7B folder: over the bound
    result_cache().clear()
    at = app("default")
    assert "about 0 s" in at.toggle(key="roles_dead").label
    assert any("outputs not measured" in c.value for c in at.caption)
    at.toggle(key="roles_dead").set_value(True).run()
    assert not at.exception and any("output_share" in c.value for c in at.caption)

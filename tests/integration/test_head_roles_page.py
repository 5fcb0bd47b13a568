"""The Head roles page driven through AppTest, with the embedded default and SmolLM2."""

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from attnviz import ui
from tests.plotly_json import spec_of

ROOT = Path(__file__).resolve().parents[2]
PAGE = "pages/head_roles.py"


@pytest.fixture(autouse=True)
def _registered(monkeypatch):
    """The page in the navigation, whether or not ui.pages() lists it yet."""
    original = ui.pages

    def pages():
        listed = original()
        if any(PAGE in str(getattr(p, "_page", "")) for p in listed):
            return listed
        return [*listed, st.Page(PAGE, title="Head roles", icon="🧩")]

    monkeypatch.setattr(ui, "pages", pages)


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
    assert any("no *dead* role" in c.value for c in at.caption)

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


def test_the_threshold_slider_changes_the_groups():
    at = app("default")
    at.slider(key="roles_threshold").set_value(1.0).run()
    assert not at.exception
    shapes = spec_of(at.get("plotly_chart")[1])["layout"].get("shapes", [])
    assert len(shapes) == 1  # at distance 1 every head is in one group

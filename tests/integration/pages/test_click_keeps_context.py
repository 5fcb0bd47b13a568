"""A head clicked in a ranked table opens the Heads page on the same model, text and settings (issue 37).

``st.switch_page`` reruns on the new page without the browser's widget states, and Streamlit then drops every
widget's value as stale: the sidebar's text and model came back as the defaults, and a layer past the default
model's last one became 0. Here the click is a table's row selected (the event the table returns), the row of the
latest layer it lists, so that a layer the default model lacks is asked for.
"""

from pathlib import Path
from types import SimpleNamespace

import pytest
import transformers
from streamlit.testing.v1 import AppTest

from attnviz.app import head_links
from tests.integration.tiny_models import tiny

ROOT = Path(__file__).resolve().parents[3]
TEXT = "Alice gave Bob a book because he asked."
CORRUPT = "Alice gave Bob a pen because he asked."  # as many tokens


@pytest.fixture
def click(monkeypatch):
    """``click["table"] = key`` makes the next drawing of that ranked table report its latest layer's row selected,
    once; ``click["head"]`` is then the (layer, head) clicked."""
    state: dict = {"table": None, "head": None}
    drawn = head_links.table

    def table(frame, *, key, **kwargs):
        event = drawn(frame, key=key, **kwargs)
        if state["table"] is None or not key.startswith(state["table"] + "_"):
            return event
        row = int(frame["layer"].to_numpy().argmax())
        state["table"], state["head"] = None, (int(frame["layer"].iloc[row]), int(frame["head"].iloc[row]))
        return SimpleNamespace(selection=SimpleNamespace(rows=[row]))

    monkeypatch.setattr(head_links, "table", table)
    return state


def opened_head(at: AppTest, click: dict, table: str) -> tuple[int, int]:
    """Click ``table``'s row (see :func:`click`); the Heads page must open on that head: its pickers and link."""
    click["table"] = table
    at.run()
    assert not at.exception, at.exception
    assert click["head"] is not None, f"no table {table} drawn"
    layer, head = click["head"]
    assert at.title[0].value.startswith("Heads")
    assert (at.selectbox(key="heads_layer").value, at.selectbox(key="heads_head").value) == (layer, head)
    assert (at.query_params["layer"], at.query_params["head"]) == (str(layer), str(head))
    return layer, head


@pytest.mark.parametrize(
    ("page", "table"),
    [
        ("ablation", "ablation_estimate_ranked"),
        ("ablation", "ablation_ranked"),  # the exact sweep's
        ("patching", "patch_ranked"),
    ],
)
def test_a_ranked_head_keeps_the_embedded_settings_and_the_text(click, page, table):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.number_input(key="n_layer").set_value(6)
    at.number_input(key="seed").set_value(7)
    at.text_area(key="text").input(TEXT)
    at.switch_page(f"pages/{page}.py").run()
    if page == "patching":
        at.text_area(key="patch_corrupt").input(CORRUPT).run()
    if table == "ablation_ranked" and "ablation_sweep_start" in [button.key for button in at.button]:
        at.button(key="ablation_sweep_start").click().run()  # else timing its first pass ran every head
    assert not at.exception, at.exception
    layer, _ = opened_head(at, click, table)
    assert layer >= 2  # past the default model's last layer: the bug opened layer 0
    assert at.text_area(key="text").value == TEXT
    assert (at.number_input(key="n_layer").value, at.number_input(key="seed").value) == (6, 7)
    assert at.query_params["text"] == TEXT


@pytest.mark.parametrize(
    ("page", "table"),
    [("ablation", "ablation_estimate_ranked"), ("patching", "dla_ranked")],  # dla: the direct logit attribution's
)
def test_a_ranked_head_keeps_a_local_folder(click, smollm2, tmp_path, page, table):
    folder = tiny(tmp_path / "llama", smollm2, transformers.LlamaConfig, transformers.LlamaForCausalLM)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.selectbox(key="model").set_value("path").run()
    at.text_input(key="model_path").input(str(folder))
    at.text_area(key="text").input(TEXT)
    at.number_input(key="max_tokens").set_value(32)
    at.switch_page(f"pages/{page}.py").run()
    if page == "patching":
        at.text_area(key="patch_corrupt").input(CORRUPT).run()
        at.radio(key="patching_tab").set_value("patching.tab_logits").run()  # the direct logit tab's table
    assert not at.exception, at.exception
    opened_head(at, click, table)
    assert (at.selectbox(key="model").value, at.text_input(key="model_path").value) == ("path", str(folder))
    assert at.text_area(key="text").value == TEXT
    assert at.number_input(key="max_tokens").value == 32
    assert any(c.value.startswith("**llama**:") and "2 layers × 4 heads" in c.value for c in at.caption)  # its record


def test_every_head_is_ranked_once_patching_ran_them_all():
    """Before the exact run the estimate's top 10; after it every head (16 here), the table sortable and scrolled."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.number_input(key="n_layer").set_value(4)
    at.text_area(key="text").input(TEXT)
    at.switch_page("pages/patching.py").run()
    at.text_area(key="patch_corrupt").input(CORRUPT).run()
    ranked = next(frame for frame in at.dataframe if frame.proto.id and "patch_ranked" in frame.proto.id)
    assert len(ranked.value) == 10
    at.button(key="patch_start").click().run()
    assert not at.exception, at.exception
    ranked = next(frame for frame in at.dataframe if frame.proto.id and "patch_ranked" in frame.proto.id)
    assert len(ranked.value) == 4 * 4 and ranked.value.iloc[:, 3].notna().all()

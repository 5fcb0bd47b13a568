"""The Token view page through AppTest: every model, a chosen token, both directions, short input."""

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attnviz.labs import token_view
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from tests.plotly_json import decode, spec_of

ROOT = Path(__file__).resolve().parents[2]
TEXT = "The cat sat on the mat because it was tired."


def app() -> AppTest:
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()


@pytest.mark.parametrize("model", ["default", "minilm", "smollm2"])
def test_the_page_draws_text_layers_and_lines_with_every_model(model):
    at = app()
    at.selectbox(key="model").set_value(model).run()
    at.text_area(key="text").input(TEXT).run()
    at.switch_page("pages/tokens.py").run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    specs = [spec_of(c) for c in at.get("plotly_chart")]
    assert len(specs) == 3  # every head of the layer, across layers, lines
    text, layers, lines = specs
    assert text["data"][0]["z"]["dtype"] == "u1" and layers["data"][0]["z"]["dtype"] == "u1"
    n_layer = len(layers["data"][0]["y"])
    assert layers["data"][0]["y"] == [f"L{i}" for i in range(n_layer)]
    legend = [t["name"] for t in lines["data"] if t.get("legendgroup") and t.get("showlegend", True)]
    assert legend == text["data"][0]["y"]  # one legend entry per head


def test_the_chosen_token_is_its_row_or_column_and_the_future_is_masked():
    at = app()
    at.checkbox(key="causal").check()
    at.text_area(key="text").input(TEXT).run()
    at.switch_page("pages/tokens.py").run()
    record = EmbeddedModel(EmbeddedConfig(causal=True)).run(TEXT, 256)
    at.selectbox(key="tokens_layer").set_value(1)
    at.selectbox(key="tokens_token").set_value(3).run()
    assert not at.exception
    heat = spec_of(at.get("plotly_chart")[0])["data"][0]
    exact = decode(heat["customdata"])
    expected = token_view.token_row(record, 1, 3).numpy()
    assert np.array_equal(np.isnan(exact), np.isnan(expected)) and np.isnan(exact[:, 4:]).all()
    assert np.allclose(exact[:, :4], expected[:, :4], atol=1e-6)
    assert (decode(heat["z"])[:, 4:] == 255).all()  # the future is grey
    at.radio(key="tokens_direction").set_value("attended_by").run()
    exact = decode(spec_of(at.get("plotly_chart")[0])["data"][0]["customdata"])
    expected = token_view.token_column(record, 1, 3).numpy()
    assert np.isnan(exact[:, :3]).all() and np.allclose(exact[:, 3:], expected[:, 3:], atol=1e-6)
    at.multiselect(key="tokens_several").set_value([2, 5]).run()
    several = decode(spec_of(at.get("plotly_chart")[2])["data"][0]["customdata"])
    expected = token_view.selected_tokens(record, 1, [2, 5], "mean", "attended_by").numpy()
    assert np.allclose(np.nan_to_num(several), np.nan_to_num(expected), atol=1e-6)


def test_one_token_explains_there_is_nothing_to_attend_to():
    at = app()
    at.text_area(key="text").input("cat").run()
    at.switch_page("pages/tokens.py").run()
    assert not at.exception
    assert any("nothing to attend to but itself" in i.value for i in at.info)
    assert not at.get("plotly_chart")


def test_a_long_input_keeps_the_payload_small_and_skips_the_lines():
    at = app()
    at.number_input(key="max_tokens").set_value(512)
    at.text_area(key="text").input(" ".join(["word"] * 600)).run()
    at.switch_page("pages/tokens.py").run()
    assert not at.exception
    specs = [c.proto.spec for c in at.get("plotly_chart")]
    assert len(specs) == 2 and sum(len(s) for s in specs) < 1_500_000
    assert any("stops at 64 tokens" in c.value for c in at.caption)

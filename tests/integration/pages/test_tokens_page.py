"""The Token view page through AppTest: every model, a chosen token, both directions, short and long inputs."""

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attnviz.labs import token_view
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from tests.plotly_json import decode, spec_of

ROOT = Path(__file__).resolve().parents[3]
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
    assert len(specs) == 4  # the running text, every head of the layer, across layers, lines
    running, text, layers, lines = specs
    assert running["data"][0]["type"] == "bar" and len(running["data"][0]["text"]) == len(text["data"][0]["x"])
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
    heat = spec_of(at.get("plotly_chart")[1])["data"][0]
    exact = decode(heat["customdata"])
    expected = token_view.token_row(record, 1, 3).numpy()
    assert np.array_equal(np.isnan(exact), np.isnan(expected)) and np.isnan(exact[:, 4:]).all()
    assert np.allclose(exact[:, :4], expected[:, :4], atol=1e-6)
    assert (decode(heat["z"])[:, 4:] == 255).all()  # the future is grey
    at.radio(key="tokens_direction").set_value("attended_by").run()
    exact = decode(spec_of(at.get("plotly_chart")[1])["data"][0]["customdata"])
    expected = token_view.token_column(record, 1, 3).numpy()
    assert np.isnan(exact[:, :3]).all() and np.allclose(exact[:, 3:], expected[:, 3:], atol=1e-6)
    at.multiselect(key="tokens_several").set_value([2, 5]).run()
    several = decode(spec_of(at.get("plotly_chart")[3])["data"][0]["customdata"])
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
    assert len(specs) == 5 and sum(len(s) for s in specs) < 1_500_000  # text, heads, share, overview, layers
    assert any("stops at 64 tokens" in c.value for c in at.caption)


LONG = " ".join(f"word{i % 97}" for i in range(2100))  # over 2,048 embedded-model tokens


def long_page() -> AppTest:
    at = app()
    at.number_input(key="max_tokens").set_value(2048)
    at.checkbox(key="causal").check()
    at.text_area(key="text").input(LONG).run()
    at.switch_page("pages/tokens.py").run()
    assert not at.exception, at.exception
    return at


def test_a_long_text_is_read_a_page_at_a_time_in_colour_with_the_rest_summed():
    at = long_page()
    record = EmbeddedModel(EmbeddedConfig(causal=True)).run(LONG, 2048)
    assert record.q_len == 2048 and at.selectbox(key="tokens_token").value == 2047
    running, text, share, overview, layers = (spec_of(c) for c in at.get("plotly_chart"))
    assert any("Tokens 1,920–2,047 of 2,048 (page 16 of 16)" in c.value for c in at.caption)
    bar = running["data"][0]
    exact = decode(bar["customdata"])  # (128, 2): token, weight
    assert exact[:, 0].tolist() == list(range(1920, 2048))  # the page holds the chosen token
    row = token_view.token_row(record, 0, 2047)[0].numpy()  # head 0: the page's default row
    assert np.allclose(exact[:, 1], row[1920:], atol=1e-6)
    levels = decode(bar["marker"]["color"])
    assert (levels < 255).all() and levels.max() == 254 and len(set(levels.tolist())) > 10  # coloured, not grey
    assert "colorbar" in bar["marker"] and "%{customdata[1]" in bar["hovertemplate"]
    heat = text["data"][0]
    assert decode(heat["z"]).shape == (4, 128) and (decode(heat["z"]) < 255).all()  # nothing masked, none grey
    assert "colorbar" in heat and "%{customdata[1]" in text["data"][1]["hovertemplate"]  # hover numbers
    before, inside, after = (decode(t["x"]) for t in share["data"])
    assert np.allclose(before + inside, 1.0, atol=1e-5) and (after == 0).all()  # a causal row: nothing after
    assert np.isclose(inside[0], row[1920:].sum(), atol=1e-5)
    sums = decode(overview["data"][0]["z"])  # (n_head + 1, 128 bins of 16 tokens)
    assert sums.shape == (5, 128) and np.allclose(np.nansum(sums, axis=1), 1.0, atol=1e-5)
    assert decode(layers["data"][0]["z"]).shape == (2, 128)  # across layers: the same page

    at.button(key="tokens_prev").click().run()
    assert not at.exception
    assert any("Tokens 1,792–1,919 of 2,048 (page 15 of 16)" in c.value for c in at.caption)
    assert decode(spec_of(at.get("plotly_chart")[0])["data"][0]["customdata"])[0, 0] == 1792
    assert at.button(key="tokens_next").disabled is False
    at.button(key="tokens_next").click().run()
    assert any("(page 16 of 16)" in c.value for c in at.caption) and at.button(key="tokens_next").disabled

    at.selectbox(key="tokens_token").set_value(300).run()  # picking a token moves the page to it
    assert any("Tokens 256–383 of 2,048 (page 3 of 16)" in c.value for c in at.caption)
    assert at.button(key="tokens_prev").disabled is False and at.button(key="tokens_next").disabled is False


def test_a_search_pick_moves_the_token_and_its_page_once():
    at = long_page()
    at.session_state["focus_token"] = 700
    at.session_state["focus_token_serial"] = 1
    at.run()
    assert not at.exception
    assert at.selectbox(key="tokens_token").value == 700
    assert any("Tokens 640–767 of 2,048 (page 6 of 16)" in c.value for c in at.caption)
    at.selectbox(key="tokens_token").set_value(5).run()  # the same pick does not pull the token back
    assert at.selectbox(key="tokens_token").value == 5
    assert any("(page 1 of 16)" in c.value for c in at.caption)


def test_a_new_text_starts_again_from_its_last_token():
    at = app()
    at.switch_page("pages/tokens.py").run()
    at.selectbox(key="tokens_token").set_value(3).run()
    at.text_area(key="text").input(TEXT + " And then it slept.").run()
    assert not at.exception
    n_tok = len(at.selectbox(key="tokens_token").options)
    assert n_tok > 11 and at.selectbox(key="tokens_token").value == n_tok - 1  # token 3 of the old text is gone
    at.selectbox(key="tokens_token").set_value(3).run()
    assert at.selectbox(key="tokens_token").value == 3  # the same text keeps the choice

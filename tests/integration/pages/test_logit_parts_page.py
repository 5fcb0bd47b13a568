"""The token page's "Why this head attends there" section and the generation page's step slider, through AppTest."""

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.plotly_json import decode, spec_of

ROOT = Path(__file__).resolve().parents[3]
TEXT = "The cat sat on the mat because it was tired."


def app() -> AppTest:
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()


@pytest.mark.parametrize("model", ["default", "smollm2"])
def test_the_why_section_draws_parts_that_add_up_to_the_logit(model):
    at = app()
    at.selectbox(key="model").set_value(model).run()
    at.text_area(key="text").input(TEXT).run()
    at.switch_page("pages/tokens.py").run()
    assert len(at.get("plotly_chart")) == 4  # the section is closed until asked for
    at.toggle(key="tokens_why").set_value(True).run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    charts = [spec_of(c) for c in at.get("plotly_chart")]
    assert len(charts) == 6
    dims, bands = charts[4], charts[5]
    logit = dims["layout"]["shapes"][0]["y0"]
    assert decode(dims["data"][0]["y"]).astype(float).sum() == pytest.approx(logit, abs=1e-4)
    assert decode(bands["data"][0]["y"]).astype(float).sum() == pytest.approx(logit, abs=1e-4)
    axis = bands["layout"]["xaxis"]["title"]["text"]
    captions = " ".join(c.value for c in at.caption)
    if model == "smollm2":
        assert "high → low" in axis and len(bands["data"][0]["x"]) == 8
        assert "the model's own rotary embedding" in captions and "Position or content" in captions
    else:
        assert "dimension pairs" in axis and "no rotary position embedding" in captions
    assert any("The logit is" in m.value for m in at.markdown)

    at.selectbox(key="tokens_why_head").set_value(1).run()
    at.selectbox(key="tokens_why_key").set_value(0).run()
    at.toggle(key="tokens_why_sort").set_value(True).run()
    assert not at.exception, at.exception
    dims = spec_of(at.get("plotly_chart")[4])
    heights = np.abs(decode(dims["data"][0]["y"]))
    assert (heights[:-1] >= heights[1:]).all()
    assert "H1" in dims["layout"]["title"]["text"] and "key 0" in dims["layout"]["title"]["text"]


def test_the_generation_slider_moves_the_outlined_step():
    at = app()
    at.selectbox(key="model").set_value("smollm2").run()
    at.text_area(key="text").input("The capital of France is").run()
    at.switch_page("pages/generation.py").run()
    at.slider(key="gen_new").set_value(4).run()
    assert not at.exception, at.exception
    assert len(at.get("plotly_chart")) == 2

    def outlined() -> tuple[float, str]:
        shape = spec_of(at.get("plotly_chart")[0])["layout"]["shapes"][-1]
        text = next(m.value for m in at.markdown if m.value.startswith("**Step"))
        return (shape["y0"] + shape["y1"]) / 2, text

    row, text = outlined()
    assert row == 0 and text.startswith("**Step 1**") and "position 5" in text
    at.slider(key="gen_step").set_value(3).run()
    assert not at.exception, at.exception
    row, text = outlined()
    assert row == 2 and text.startswith("**Step 3**") and "position 7" in text
    at.slider(key="gen_new").set_value(2).run()  # fewer steps than the slider stood at
    assert not at.exception, at.exception
    assert at.slider(key="gen_step").value == 2 and outlined()[0] == 1

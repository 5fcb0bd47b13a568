"""The Heads page's lines view: every head as lines on a short text, the exact weights in the hover, a click that
opens the head, and one line saying why not on a text too long for it."""

from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

from attnviz.figures.lines import MIN_WEIGHT, most_tokens
from tests.grid_canvas import has_grid
from tests.plotly_json import decode, spec_of

ROOT = Path(__file__).resolve().parents[3]
SHORT = "The cat sat on the mat."


def lines_page(text: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.switch_page("pages/heads.py").run()
    at.text_area(key="text").input(text).run()
    at.radio(key="heads_grid_style").set_value("lines").run()
    assert not at.exception and not at.error
    return at


def test_a_short_text_draws_every_head_as_lines_from_its_exact_weights():
    at = lines_page(SHORT)
    spec = spec_of(at.get("plotly_chart")[0])
    points = next(trace for trace in spec["data"] if trace.get("hovertemplate"))
    n_layer = len(spec["layout"]["yaxis"]["ticktext"])
    n_head = len(spec["layout"]["xaxis"]["ticktext"])
    n_q = len(points["text"]) // (n_layer * n_head)
    assert n_q >= 6 and len(points["text"]) == n_layer * n_head * n_q
    drawn = sum(np.asarray(decode(t["x"])).size // 3 for t in spec["data"] if t.get("mode") == "lines")
    caption = next(c.value for c in at.caption if "Each panel is a head" in c.value)
    assert f"({drawn:,} lines of the" in caption and f"at least {MIN_WEIGHT:.3f}" in caption
    first = points["text"][0]  # the first query of L0 H0: its three heaviest keys, heaviest first
    weights = [float(part.rsplit(": ", 1)[1]) for part in first.split(" | ", 1)[1].split(", ")]
    assert first.startswith("0 ") and len(weights) == 3 and weights == sorted(weights, reverse=True)
    assert 0 < sum(weights) <= 1 + 1e-5 and points["customdata"][0] == [0, 0]
    assert not has_grid(at)  # no heat-map grid: the lines are drawn instead


def test_a_click_on_a_query_opens_its_head():
    at = lines_page(SHORT)
    at.session_state["heads_lines"] = {"selection": {"points": [{"customdata": [1, 2], "x": 0, "y": 0}]}}
    at.run()
    assert not at.exception
    assert at.selectbox(key="heads_layer").value == 1 and at.selectbox(key="heads_head").value == 2


def test_a_text_too_long_for_lines_says_so_in_one_line():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.switch_page("pages/heads.py").run()
    at.text_area(key="text").input("one two three four five six seven eight nine ten " * 6).run()
    at.radio(key="heads_grid_style").set_value("lines").run()
    assert not at.exception and not at.error
    (info,) = [i.value for i in at.info if "Lines are drawn for texts of at most" in i.value]
    n_layer, n_head = 2, 4  # the embedded model's default
    assert f"at most {most_tokens(n_layer, n_head)} tokens" in info
    assert has_grid(at), "the heat-map grid is drawn instead"

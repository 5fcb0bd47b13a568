"""attnviz/app/plotly_once.js in a real headless Chromium: a chart is drawn once on its first render, and what a
reader does with it (a rerun with new data, a click that selects, the modebar, a narrower window) still works.

Streamlit 1.67 hands Plotly each new chart twice (once as it mounts, then a themed copy of it); Plotly draws the
copy again unless the script tells it that nothing changed. The counts come from benchmarks.plotly_draws: the
``plotly_beforeplot`` events (one per full draw) between one call of Plotly's API and the next."""

import re
from pathlib import Path

import pytest

import attnviz.app
from benchmarks.plotly_draws import MINIMAL, check, per_chart, visit
from tools.browser import streamlit_server

pytestmark = pytest.mark.browser

ONCE = (Path(attnviz.app.__file__).parent / "plotly_once.js").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(MINIMAL))
def test_a_chart_is_drawn_once_on_its_first_render(tmp_path, browser, name):
    (tmp_path / "page.py").write_text(MINIMAL[name])
    with streamlit_server(script="page.py", root=tmp_path) as url:
        (as_is,) = per_chart(visit(browser, url, "", 1, None))
        (once,) = per_chart(visit(browser, url, "", 1, ONCE))
    # as Streamlit draws it: two calls, and the second draws the whole chart again
    assert as_is["calls"] == ["react", "react"], as_is
    assert as_is["draws_by_call"][1] >= 1, as_is
    # with the script: the same two calls, and only the first draws (its draws: the chart, and a second pass when
    # automargin makes room for the tick labels, which is Plotly's own layout of a chart it has not drawn before)
    assert once["calls"] == ["react", "react"], once
    assert once["draws_by_call"][0] >= 1 and once["draws_by_call"][1] == 0, once
    assert once["sizes"][-1] == as_is["sizes"][-1]  # drawn at the same size


def test_reruns_clicks_the_modebar_and_resizing_still_work(browser):
    seen = check(browser, ONCE)
    first, rerun = seen["first"], seen["after_rerun"]
    z00 = lambda text: re.search(r"z00=([0-9.]+)", text).group(1)  # noqa: E731
    assert z00(first["text"]) == first["drawn_z00"]
    assert z00(rerun["text"]) == rerun["drawn_z00"] != first["drawn_z00"]  # new data drawn, not the old kept
    assert "selected=1" in seen["after_click"]["text"]  # on_select="rerun" returned the clicked cell
    assert seen["modebar_buttons"] > 0
    assert seen["narrow_width"] < 500  # the 500 px figure fits a 420 px window

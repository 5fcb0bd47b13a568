"""The tour's "too many heads on small data" step in AppTest: in both languages, its two charts with their marks,
and its number the heads sweep's own (the lab called directly: no page prints this sweep), moving with n_head."""

import pytest

from attnviz.app.tour import pitfall_heads
from attnviz.figures.tour import HIGHLIGHT_COLOR
from attnviz.i18n.message import render
from attnviz.labs.tour.heads_sweep import heads_sweep, sweep_number, sweep_row
from tests.integration.pages.tour.apptest import SMALL_SWEEP, numbers, tour_app
from tests.plotly_json import spec_of

SMALL = SMALL_SWEEP
KEY = "tour_pitfall_heads_n_head"


@pytest.fixture
def small_sweep(monkeypatch):
    monkeypatch.setattr(pitfall_heads, "SWEEP_CONFIG", SMALL)
    return heads_sweep(SMALL)


def _marks(at) -> tuple[list, list]:
    """The similarity chart's highlight frames and the curve chart's vertical mark (their x)."""
    charts = {chart.key: spec_of(chart) for chart in at.get("plotly_chart")}
    similarity = charts["tour_pitfall_heads_similarity"]["layout"].get("shapes", [])
    curve = charts["tour_pitfall_heads_curve"]["layout"].get("shapes", [])
    frames = [s for s in similarity if s.get("line", {}).get("color") == HIGHLIGHT_COLOR]
    lines = [s["x0"] for s in curve if s.get("line", {}).get("color") == HIGHLIGHT_COLOR]
    return frames, lines


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_step_states_the_sweeps_number_and_moves_with_the_number_of_heads(small_sweep, lang):
    at = tour_app("pitfall_heads", lang)
    assert not at.exception
    most = SMALL.n_heads[-1]
    assert at.select_slider(key=KEY).value == most  # the default: the most heads, the pitfall itself
    assert numbers(at) == [render(sweep_number(small_sweep, most), lang)]
    frames, lines = _marks(at)
    assert lines == [most]
    point = small_sweep.point(most)
    # the groups that attend alike are framed; where there are none, the closest two heads (their two cells)
    assert len(frames) == (len(point.similarity.groups()) or 2)

    at.select_slider(key=KEY).set_value(2).run()
    assert not at.exception
    assert numbers(at) == [render(sweep_number(small_sweep, 2), lang)]
    assert _marks(at)[1] == [2]

    at.select_slider(key=KEY).set_value(1).run()  # one head: nothing to compare, the number says so
    assert numbers(at) == [render(sweep_number(small_sweep, 1), lang)]
    assert _marks(at)[0] == []


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_pitfalls_table_row_is_the_sweeps_finding_in_the_readers_words(small_sweep, lang):
    at = tour_app("pitfall_heads", lang)  # the step's run computed the sweep into the process's cache
    assert not at.exception
    assert pitfall_heads.row(None) == render(sweep_row(small_sweep), lang)  # read back: no context needed

"""Long jobs on the pages draw a progress bar fed by the job's own steps; a fragment's widget still redraws its chart."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from attnviz.app import loading
from attnviz.app.loading import result_cache
from tests.plotly_json import spec_of

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def bars(monkeypatch):
    """Every progress bar the pages open: its title and the states its job reported."""
    opened = []
    real = loading.progress_bar

    def recording(title):
        states = []
        opened.append((title, states))
        context = real(title)

        class Recorded:
            def __enter__(self):
                progress = context.__enter__()
                draw = progress._on_update

                def both(state):
                    states.append(state)
                    draw(state)

                progress._on_update = both
                return progress

            def __exit__(self, *exc):
                return context.__exit__(*exc)

        return Recorded()

    monkeypatch.setattr(loading, "progress_bar", recording)
    result_cache().clear()
    return opened


def test_the_capture_reports_every_layer_and_a_cached_record_opens_no_bar(bars):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.text_area(key="text").input("a long job shows its layers, one after another").run()
    assert not at.exception
    title, states = bars[-1]
    assert title == "Capturing attention…"
    n_layer = states[-1].total
    assert n_layer >= 2 and [(s.done, s.total) for s in states] == [(i, n_layer) for i in range(1, n_layer + 1)]
    assert {s.label for s in states} == {"progress.layer"}
    assert states[0].remaining_s is not None and states[-1].remaining_s == 0.0  # calibrated from the first layer
    assert not at.get("progress")  # cleared when the capture ended
    opened = len(bars)
    at.run()
    assert len(bars) == opened  # the record is cached: nothing runs, no bar


def test_the_tiling_fragment_redraws_its_chart():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.switch_page("pages/cost.py").run()
    assert not at.exception
    at.slider(key="cost_keys").set_value(40).run()
    at.slider(key="cost_block").set_value(10).run()
    assert not at.exception
    tiling = spec_of(at.get("plotly_chart")[0])
    scores = [trace for trace in tiling["data"] if trace["type"] == "bar" and trace.get("xaxis", "x") == "x"]
    assert [len(trace["x"]) for trace in scores] == [10, 10, 10, 10]  # 40 keys in blocks of 10
    assert any("1 × 10 tile" in c.value and "instead of 1 × 40" in c.value for c in at.caption)

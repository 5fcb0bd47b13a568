"""An exact result one session asked for does not appear in another session that did not (issue 37).

Results are computed once per process and shared, but patching every head or sweeping every ablation takes a
click: a second reader on the same text and model must see the button, not the first reader's result. Once they
click, the shared result is theirs too.
"""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from attnviz.app.cache import BoundedCache
from attnviz.app.loading import SessionResults

ROOT = Path(__file__).resolve().parents[3]
TEXT = "Carol lent Dave a pen because he asked."
CORRUPT = "Carol lent Dave a cup because he asked."  # as many tokens


def patching_page() -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.number_input(key="n_layer").set_value(3)
    at.number_input(key="seed").set_value(11)
    at.text_area(key="text").input(TEXT)
    at.switch_page("pages/patching.py").run()
    at.text_area(key="patch_corrupt").input(CORRUPT).run()
    assert not at.exception, at.exception
    return at


def charts(at: AppTest) -> list[str]:
    return [chart.key for chart in at.get("plotly_chart")]


def test_patching_every_head_in_one_session_is_not_shown_in_another():
    first = patching_page()
    first.button(key="patch_start").click().run()
    assert not first.exception, first.exception
    assert "patch_exact_map" in charts(first)
    second = patching_page()  # another browser session, the same request
    assert "patch_exact_map" not in charts(second)
    assert "patch_start" in [button.key for button in second.button]
    second.button(key="patch_start").click().run()
    assert not second.exception, second.exception
    assert "patch_exact_map" in charts(second)
    assert "patch_exact_map" in charts(first.run())  # still the first session's


def test_a_session_sees_only_the_exact_results_it_asked_for():
    cache = BoundedCache(max_bytes=1 << 20, max_entries=8)
    mine, theirs = SessionResults(cache, set()), SessionResults(cache, set())
    theirs.get_or_compute(("ablation_sweep", "k"), lambda: "sweep")
    theirs.get_or_compute(("record", "k"), lambda: "record")
    assert mine.lookup(("ablation_sweep", "k")) == (False, None) and ("ablation_sweep", "k") not in mine
    assert mine.lookup(("record", "k")) == (True, "record")  # what every page draws anyway is shared
    assert theirs.lookup(("ablation_sweep", "k")) == (True, "sweep")
    assert mine.get_or_compute(("ablation_sweep", "k"), lambda: "again") == "sweep"  # asked: the shared result
    assert mine.lookup(("ablation_sweep", "k")) == (True, "sweep")

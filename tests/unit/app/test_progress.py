"""The progress bar's words: counts, elapsed and estimated time in both languages, and a bar that goes away."""

import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from attnviz.app.progress import duration_text, progress_text
from attnviz.core.progress import ProgressState
from attnviz.i18n.catalogue import catalogue
from attnviz.i18n.translate import set_language

ROOT = Path(__file__).resolve().parents[3]


def state(remaining_s, done=12, total=30, elapsed_s=41.2, label="progress.layer"):
    return ProgressState(label, done, total, 1, 1, done / total, elapsed_s, remaining_s)


@pytest.fixture
def zh():
    set_language("zh")
    yield
    set_language("en")


def test_the_bar_says_the_counts_the_time_spent_and_the_time_left():
    assert progress_text("Capturing attention…", state(55.4)) == (
        "Capturing attention… · Layer 12 of 30 · 41 s elapsed · about 55 s left"
    )
    assert progress_text("Capturing attention…", state(None)) == (
        "Capturing attention… · Layer 12 of 30 · 41 s elapsed · estimating the time left…"
    )


def test_long_times_read_in_minutes(zh):
    assert duration_text(89.4) == "89 秒"
    assert duration_text(125.0) == "2 分 05 秒"
    assert progress_text("正在捕获注意力…", state(130.0, elapsed_s=3.0)) == (
        "正在捕获注意力… · 第 12 层，共 30 层 · 已用 3 秒 · 约剩 2 分 10 秒"
    )


def test_every_stage_the_library_names_has_words_in_both_languages():
    named = set()
    for path in (ROOT / "attnviz").rglob("*.py"):
        named |= set(re.findall(r'"(progress\.[a-z_]+)"', path.read_text(encoding="utf-8")))
    assert {"progress.layer", "progress.step", "progress.run", "progress.measurement"} <= named
    for lang in ("en", "zh"):
        assert named <= set(catalogue(lang)), named - set(catalogue(lang))


def script():
    import time

    import streamlit as st

    from attnviz.app.progress import progress_bar

    with progress_bar("Working…") as progress:
        progress.stage("progress.step", 3)
        for _ in range(3):
            time.sleep(0.01)
            progress.step()
        st.session_state.last = progress.state()
    st.text("done")


def test_the_bar_is_gone_when_the_job_ends():
    at = AppTest.from_function(script).run()
    assert not at.exception
    assert [t.value for t in at.text] == ["done"]
    assert not at.get("progress")  # cleared, not left at 100 %
    last = at.session_state.last
    assert (last.done, last.total, last.remaining_s) == (3, 3, 0.0)


def test_the_bar_says_what_its_time_left_rests_on():
    recent = ProgressState(
        "ablation_lib.progress_heads", 40, 270, 1, 1, 0.15, 9.0, 31.0, basis="recent", basis_passes=3
    )
    assert progress_text("Sweeping…", recent) == (
        "Sweeping… · Head 40 of 270 · 9 s elapsed · about 31 s left, from the last passes (3)"
    )
    priced = ProgressState("ablation_lib.progress_heads", 32, 270, 1, 1, 0.12, 0.0, 25.0, basis="price")
    assert progress_text("Sweeping…", priced).endswith("Head 32 of 270 · 0 s elapsed · about 25 s left, as priced")


def test_a_quote_follows_a_stopped_runs_passes_then_a_fresh_probe(monkeypatch):
    from attnviz.app import progress as app_progress
    from attnviz.core.time_agreement import Lap

    probes = iter([0.05, 0.15])  # the probe as the price was timed, then now: the machine is 3x slower
    monkeypatch.setattr(app_progress, "current_probe", lambda device=None, max_age_s=10.0: next(probes))
    monkeypatch.setattr(app_progress, "_probed", {})
    assert app_progress.probed(("sweep", 1), lambda: "timed")() == "timed"
    fresh = app_progress.quote(("sweep", 1), 20.0)
    assert (fresh.seconds, fresh.basis) == (pytest.approx(60.0), "fresh")
    laps = [Lap(0, 2.0, 4.0, 4.0)] * 3  # a stopped run went at 2x its price
    assert app_progress.quote(("sweep", 1), 20.0, laps).seconds == pytest.approx(40.0)
    assert app_progress.quote(("never timed", 2), 20.0).basis == "timed"  # no probe then: the price as timed

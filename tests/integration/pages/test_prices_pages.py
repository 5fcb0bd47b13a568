"""Honest prices on the page: the sweep's button counts the heads its bar counts (those run while timing counted
done), and a Continue after a Stop is priced from the passes that run went at."""

import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[3]
TEXT = "The cat sat on the mat because it was tired, " * 3  # 33 tokens


def test_the_sweeps_button_and_bar_count_the_same_heads_and_continue_prices_what_is_left(monkeypatch):
    from attnviz.app import progress as app_progress
    from attnviz.labs.heads_matter import ablation, schedule

    monkeypatch.setattr(schedule, "PASS_SECONDS", 1e9)  # 16 rows a pass (bytes alone), however busy this machine is
    drawn, text_of = [], app_progress.progress_text

    def recording(title, state):
        if state.label == "ablation_lib.progress_heads":  # the sweep's bar (the capture draws its own)
            drawn.append(state)
        return text_of(title, state)

    monkeypatch.setattr(app_progress, "progress_text", recording)
    monkeypatch.setattr(app_progress, "DRAW_EVERY_S", 0.0)  # every state drawn
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.text_area(key="text").input(TEXT).run()
    at.number_input(key="n_layer").set_value(8).run()
    at.number_input(key="n_head").set_value(8).run()  # 64 heads, 16 a pass: timing runs the first pass and the last
    at.switch_page("pages/ablation.py").run()
    assert not at.exception, at.exception
    label = at.button(key="ablation_sweep_start").label
    found = re.match(r"Run the sweep \((\d+) heads, about .*: (\d+) were ablated while timing, (\d+) left\)", label)
    assert found, label
    n, timed, left = map(int, found.groups())
    assert (n, timed, left) == (64, 32, 32)
    piece, calls = ablation.sweep_piece, []

    def stopped_by_a_click(*args):
        calls.append(1)
        if len(calls) == 2:  # the first pass ended (its time kept); the click lands as the second begins
            import streamlit as st

            st.session_state["ablation_sweep_state"]["status"] = "stopped"
            st.rerun()
        return piece(*args)

    monkeypatch.setattr(ablation, "sweep_piece", stopped_by_a_click)
    at.button(key="ablation_sweep_start").click().run()
    assert not at.exception, at.exception
    assert {state.total for state in drawn} == {n}  # the bar's total is the button's
    assert (drawn[0].done, drawn[0].basis) == (timed, "price")  # the timed heads done, the button's price
    assert drawn[-1].done == timed + 16 and drawn[-1].basis == "recent"  # re-measured on the pass it ran
    label = at.button(key="ablation_sweep_start").label
    assert label.startswith("Continue (16 heads left, about "), label
    assert any("this run's last 1 passes" in caption.value for caption in at.caption), [c.value for c in at.caption]
    drawn.clear()
    at.button(key="ablation_sweep_start").click().run()
    assert not at.exception, at.exception
    assert {state.total for state in drawn} == {n} and drawn[0].done == 48 and drawn[-1].done == n
    assert drawn[0].basis == "price"  # before its first pass: the Continue button's price, from the stopped run


def test_exact_patchings_button_and_bar_count_the_same_heads(monkeypatch):
    from attnviz.app import progress as app_progress
    from attnviz.labs.heads_matter import attribution

    def estimate(source, pair, clean, corrupt):  # the page's estimate, faked: this test is about the exact run
        return attribution.Estimate([[0.0] * pair.n_head for _ in range(pair.n_layer)], 0.01, "faked", kind="patch")

    monkeypatch.setattr(attribution, "estimate_patching", estimate)
    drawn, text_of = [], app_progress.progress_text

    def recording(title, state):
        if state.label == "patching_lib.progress":
            drawn.append(state)
        return text_of(title, state)

    monkeypatch.setattr(app_progress, "progress_text", recording)
    monkeypatch.setattr(app_progress, "DRAW_EVERY_S", 0.0)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.text_area(key="text").input("the cat sat on the soft mat").run()
    at.number_input(key="n_layer").set_value(8).run()
    at.number_input(key="n_head").set_value(8).run()
    at.switch_page("pages/patching.py").run()
    at.text_area(key="patch_corrupt").input("the dog sat on the soft mat").run()
    assert not at.exception, at.exception
    label = at.button(key="patch_start").label
    found = re.match(
        r"Patch every head exactly \((\d+) heads, about .*: (\d+) were patched while timing, (\d+) left", label
    )
    assert found, label
    n, timed, left = map(int, found.groups())
    assert n == 64 and timed + left == n and timed > 0
    at.button(key="patch_start").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert drawn and {state.total for state in drawn} == {n}
    assert drawn[0].done == timed and drawn[-1].done == n

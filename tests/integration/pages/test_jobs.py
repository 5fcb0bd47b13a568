"""The one run / stop / continue machine (attnviz.app.jobs.PieceJob), as both pages use it: a run interrupted by
any click, not only Stop's, stands stopped with its finished passes kept, and Continue runs only what is left."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[3]
TEXT = "The cat sat on the mat because it was tired, " * 3  # 33 tokens


def test_a_sweep_interrupted_by_a_click_elsewhere_stands_stopped_and_continues(monkeypatch):
    from attnviz.labs.heads_matter import ablation, schedule

    monkeypatch.setattr(schedule, "PASS_SECONDS", 1e9)  # 16 rows a pass (bytes alone), however busy this machine is
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.text_area(key="text").input(TEXT).run()
    at.number_input(key="n_layer").set_value(8).run()
    at.number_input(key="n_head").set_value(8).run()  # 64 heads: timing ran 32 of them, two passes of 16 left
    at.switch_page("pages/ablation.py").run()
    assert not at.exception, at.exception
    piece, calls = ablation.sweep_piece, []

    def interrupted(*args):
        calls.append(1)
        values = piece(*args)
        if len(calls) == 1:  # the pass ends, then a click on another widget stops the script at its next drawing
            import streamlit as st

            st.session_state["ablation_sweep_state"]["values"].update(values)  # as run_pieces keeps a pass's heads
            st.rerun()  # Stop was not pressed: its callback never ran
        return values

    monkeypatch.setattr(ablation, "sweep_piece", interrupted)
    at.button(key="ablation_sweep_start").click().run()
    assert not at.exception, at.exception
    assert at.session_state["ablation_sweep_state"]["status"] == "stopped"
    assert len(calls) == 1  # it did not start again by itself
    assert [w.value for w in at.warning][-1].startswith("Stopped after 48 of 64 heads"), [w.value for w in at.warning]
    assert at.button(key="ablation_sweep_start").label.startswith("Continue (16 heads left, about ")
    at.button(key="ablation_sweep_start").click().run()
    assert not at.exception, at.exception
    assert len(calls) == 2 and "ablation_sweep_start" not in [button.key for button in at.button]
    assert "ablation_sweep_state" not in at.session_state and len(at.dataframe[-1].value) == 64

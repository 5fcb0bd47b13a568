"""The Training page and its default run: the stuck loss shows, deterministically, and finished runs are cached."""

import json
import time
from pathlib import Path
from types import SimpleNamespace

import streamlit as st
from streamlit.testing.v1 import AppTest

from attnviz.labs.scaling import SCALE_KINDS
from attnviz.labs.training import runs as training
from attnviz.labs.training.report import clearly_worse, runs_as_json
from attnviz.labs.training.runs import TrainingConfig, train_variant

ROOT = Path(__file__).resolve().parents[3]


def test_the_default_run_shows_the_stuck_loss_and_is_deterministic(default_training):
    # the three runs in lockstep, as `attnviz train-scale --json` printed them (shared with the CLI's test: 100 s)
    config = TrainingConfig()
    assert default_training["returncode"] == 0, default_training["stderr"]
    out = json.loads(default_training["stdout"])
    assert [r["scale"] for r in out["runs"]] == list(SCALE_KINDS)
    results = {r["scale"]: SimpleNamespace(**r) for r in out["runs"]}
    dk, none, dmodel = results["sqrt_dk"], results["none"], results["sqrt_dmodel"]
    assert dk.final_accuracy >= 0.9
    assert none.final_loss > dk.final_loss and clearly_worse(none, dk)
    assert dmodel.final_loss > dk.final_loss and clearly_worse(dmodel, dk)
    assert all(len(r.losses) == config.steps for r in results.values())
    # the same seed gives the same run, in lockstep with the others in that process or alone in this one
    again = train_variant(config, "none")
    assert again.steps_done == config.steps and not again.stopped
    printed = runs_as_json([again])["runs"][0]  # as the command prints it: each figure to 6 places
    assert printed["losses"] == none.losses and printed["final_loss"] == none.final_loss
    assert printed["final_accuracy"] == none.final_accuracy


def page(**widgets) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.switch_page("pages/training.py").run()
    for key, value in widgets.items():
        at.number_input(key=key).set_value(value)
    return at.run()


def test_training_on_the_page_draws_the_table_and_is_served_from_the_cache_after(count_trainings):
    at = page(training_d_k=32, training_steps=30, training_seed=101)
    assert not at.exception and not at.error
    assert any("Press **Train**" in i.value for i in at.info)
    assert not at.dataframe
    at.button(key="training_train").click().run()
    assert not at.exception, at.exception
    assert len(count_trainings) == 1 and count_trainings[0].steps == 30 and count_trainings[0].head_dim == 32
    table = at.dataframe[0].value
    assert list(table["steps"]) == [30, 30, 30] and len(table) == 3
    assert table["accuracy"].between(0, 1).all()
    assert [b.key for b in at.button] == ["training_train"]  # Stop is gone once it finished
    assert len(at.get("plotly_chart")) == 1
    assert at.subheader[0].value == "What to look for" and "1/√d_k" in at.markdown[-1].value

    started = time.perf_counter()
    at.run()
    assert time.perf_counter() - started < 1.0
    assert len(count_trainings) == 1
    assert any("come from the cache" in c.value for c in at.caption)
    assert at.dataframe[0].value.equals(table)

    # leave and come back: the widgets return to the trained settings and the results to the page, untrained
    at.switch_page("pages/heads.py").run()
    at.switch_page("pages/training.py").run()
    assert at.number_input(key="training_steps").value == 30 and at.number_input(key="training_d_k").value == 32
    assert len(count_trainings) == 1 and at.dataframe[0].value.equals(table)


def test_stop_keeps_the_curves_so_far_and_caches_nothing(monkeypatch, count_trainings):
    real = training.train_scale

    def interrupted(config, on_step=None, **kwargs):
        def step(kind, n, loss, accuracy):
            on_step(kind, n, loss, accuracy)
            if n == 5 and kind == SCALE_KINDS[-1]:
                st.stop()  # what Streamlit does to a running script when Stop is clicked (a rerun request)

        return real(config, on_step=step, **kwargs)

    at = page(training_d_k=32, training_steps=40, training_seed=102)
    monkeypatch.setattr(training, "train_scale", interrupted)
    at.button(key="training_train").click().run()
    assert not at.exception
    assert at.button(key="training_stop").label == "Stop"  # drawn while it trains
    at.button(key="training_stop").click().run()
    assert not at.exception and not at.dataframe
    assert any("Stopped after step 5 of 40" in w.value for w in at.warning)
    assert len(at.get("plotly_chart")) == 1

    monkeypatch.setattr(training, "train_scale", real)
    at.run()
    assert not at.dataframe and at.warning  # a stopped training was not cached as finished
    at.button(key="training_train").click().run()
    assert not at.exception and not at.warning
    assert list(at.dataframe[0].value["steps"]) == [40, 40, 40]


def test_settings_over_the_bound_are_refused_and_adam_gets_its_learning_rate():
    at = page(training_d_k=256, training_n_head=8, training_steps=2000)
    assert not at.exception
    assert any("Invalid training settings" in e.value and "use at most" in e.value for e in at.error)
    at = page()
    assert at.select_slider(key="training_lr").value == 0.1
    at.selectbox(key="training_optimiser").set_value("adam").run()
    assert at.select_slider(key="training_lr").value == 3e-4

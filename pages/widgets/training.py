"""The Training page's own widgets: a live training with progress, a Stop button and its chart, and hosted mode's
cap on a session's training time."""

from __future__ import annotations

import time

import streamlit as st

from attnviz import settings
from attnviz.app import hosted
from attnviz.app.progress import progress_text
from attnviz.app.queue_view import admitted, request_id
from attnviz.app.training_cache import finished_trainings  # noqa: F401  (the page's import; shared with the warm-up)
from attnviz.app.widgets import plotly
from attnviz.core.progress import Progress, ProgressState
from attnviz.errors import TrainingCapError
from attnviz.figures.training import make_training_figure
from attnviz.i18n.translate import t
from attnviz.labs.scaling import SCALE_KINDS
from attnviz.labs.training import runs as training
from attnviz.labs.training.runs import RunResult, TrainingConfig

TRAINING_LIVE = "training_live"  # the curves of the training in progress, which a stop leaves behind
TRAINING_DRAW_EVERY_S = 1.0  # redraw the live chart at most this often; the progress bar, every 0.1 s


def train_live(config: TrainingConfig) -> list[RunResult]:
    """Train the three runs with a progress bar, a Stop button and a live chart; a Stop interrupts it (a rerun)."""
    live = st.session_state[TRAINING_LIVE] = {"config": config, "losses": {}, "accuracies": {}, "step": 0}
    for kind in SCALE_KINDS:
        live["losses"][kind], live["accuracies"][kind] = [], []
    bar = st.progress(0.0, text=t("ui_training.starting"))
    stop = st.empty()
    stop.button(t("ui_training.stop"), key="training_stop", help=t("ui_training.stop_help"))
    chart = st.empty()
    drawn = {"bar": 0.0, "chart": 0.0, "n": 0}

    def on_progress(state: ProgressState) -> None:
        now = time.perf_counter()
        if now - drawn["bar"] >= 0.1 or state.done == state.total:  # each message lets a Stop interrupt here
            drawn["bar"] = now
            bar.progress(state.fraction, text=progress_text(t("ui_training.training"), state))

    def on_step(kind: str, step: int, loss: float, accuracy: float) -> None:
        live["losses"][kind].append(loss)
        live["accuracies"][kind].append(accuracy)
        if kind != SCALE_KINDS[-1]:
            return
        live["step"], now = step, time.perf_counter()
        if now - drawn["chart"] >= TRAINING_DRAW_EVERY_S:
            drawn["chart"], drawn["n"] = now, drawn["n"] + 1
            fig = make_training_figure(live["losses"], live["accuracies"], steps=config.steps, n_values=config.values)
            with chart:
                plotly(fig, key=f"training_live_{drawn['n']}")

    results = training.train_scale(  # looked up on each call: tests count the trainings
        config, on_step=on_step, progress=Progress(on_update=on_progress)
    )
    for placeholder in (bar, stop, chart):
        placeholder.empty()
    return results


def admitted_training(config: TrainingConfig) -> list[RunResult]:
    """:func:`train_live` once the server's memory budget admits it, like every other heavy job (the Training page
    keeps its own cache, so it does not go through ``loading.cached_job``)."""
    with admitted(training.training_need(config), request_id("training", (config,))):
        return train_live(config)


TRAINING_LEDGER = "training_ledger"  # this session's hosted training time (hosted.TrainingLedger)


def capped_training(config: TrainingConfig) -> list[RunResult]:
    """:func:`train_live`, within the session's training time on a hosted server; over it, stops after saying
    how long to wait. A stopped training counts the time it ran."""
    if not hosted.is_hosted():
        return admitted_training(config)
    ledger = st.session_state.setdefault(TRAINING_LEDGER, hosted.TrainingLedger())
    needed = training.training_need(config).seconds
    try:
        ledger.check(needed, time.time())
    except TrainingCapError as err:
        values = {"cap": settings.TRAIN_SESSION_SECONDS, "minutes": settings.TRAIN_SESSION_WINDOW_S // 60}
        if err.wait_s == float("inf"):
            st.error(t("hosted.training_too_long", needed=f"{err.needed_s:.0f}", **values))
        else:
            st.error(
                t(
                    "hosted.training_cap",
                    used=f"{err.used_s:.0f}",
                    needed=f"{err.needed_s:.0f}",
                    wait=f"{err.wait_s:.0f}",
                    **values,
                )
            )
        st.stop()
    start = time.time()
    try:
        return admitted_training(config)
    finally:
        ledger.charge(time.time() - start, time.time())

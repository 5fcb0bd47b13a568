"""Training: the tutorial's "loss stuck", trained live under 1/√d_k, no scale and 1/√d_model."""

import streamlit as st

from attnviz import settings
from attnviz.app.navigation import frame_settings
from attnviz.app.widgets import plotly, show_error, table
from attnviz.figures.training import make_training_figure
from attnviz.i18n.message import msg
from attnviz.i18n.translate import t, tr
from attnviz.labs.scaling import scale_titles
from attnviz.labs.training.report import describe_runs, results_column_names, results_table
from attnviz.labs.training.runs import TARGET, TARGET_WINDOW, TrainingConfig, training_macs
from pages.widgets.training import TRAINING_LIVE, capped_training, finished_trainings

LAST = "training_config"  # the settings this session last trained: the widgets come back to them
LIVE = TRAINING_LIVE  # the curves of the training in progress, which a stop leaves behind
OPTIMISERS = ("sgd", "adam")

st.title(t("training.title"))
st.markdown(t("training.intro"))
st.caption(t("training.own_inputs"))  # the sidebar's text and model play no part here: say so before anything runs
sidebar = frame_settings()


def _default_learning_rate() -> None:
    st.session_state.training_lr = settings.TRAIN_LEARNING_RATE[st.session_state.training_optimiser]


last = st.session_state.get(LAST, TrainingConfig())
for key, value in {
    "training_d_k": last.head_dim,
    "training_n_head": last.n_head,
    "training_steps": last.steps,
    "training_optimiser": last.optimiser,
    "training_lr": last.learning_rate,
    "training_seed": last.seed,
}.items():
    if key not in st.session_state:
        st.session_state[key] = value

cols = st.columns(6)
d_k, n_head, steps = settings.TRAIN_HEAD_DIM, settings.TRAIN_N_HEAD, settings.TRAIN_STEPS
cols[0].number_input(t("training.d_k"), d_k.low, d_k.high, step=8, key="training_d_k")
cols[1].number_input("n_head", n_head.low, n_head.high, key="training_n_head")
cols[2].number_input(t("training.steps"), steps.low, steps.high, step=50, key="training_steps")
cols[3].selectbox(
    t("training.optimiser"),
    OPTIMISERS,
    format_func={o: t(f"training.optimiser_{o}") for o in OPTIMISERS}.get,
    key="training_optimiser",
    on_change=_default_learning_rate,
)
cols[4].select_slider(
    t("training.learning_rate"), settings.TRAIN_LEARNING_RATES, key="training_lr", format_func="{:g}".format
)
cols[5].number_input(t("training.seed"), settings.SEED.low, settings.SEED.high, key="training_seed")
try:
    config = TrainingConfig(
        head_dim=int(st.session_state.training_d_k),
        n_head=int(st.session_state.training_n_head),
        steps=int(st.session_state.training_steps),
        learning_rate=float(st.session_state.training_lr),
        optimiser=st.session_state.training_optimiser,
        seed=int(st.session_state.training_seed),
        device=str(sidebar.spec.device) if sidebar.spec is not None else "cpu",  # the sidebar's device
    )
except ValueError as err:
    show_error(msg("training.invalid", error=err))
    st.stop()
st.caption(
    t(
        "training.config_caption",
        n_head=config.n_head,
        head_dim=config.head_dim,
        d_model=config.d_model,
        pairs=config.pairs,
        keys=config.keys,
        values=config.values,
        batch=config.batch,
        tera=training_macs(config) / 1e12,
        max_tera=settings.TRAIN_MAX_MACS / 1e12,
    )
)


cache = finished_trainings()
cached = config in cache
results = None
if st.button(t("training.train"), key="training_train", type="primary") or cached:
    results = cache.get_or_compute(
        config, lambda: capped_training(config)
    )  # a Stop interrupts it (a rerun): nothing is stored
    st.session_state[LAST] = config
    st.session_state.pop(LIVE, None)
if cached:
    st.caption(t("training.from_cache"))

live = st.session_state.get(LIVE)
if results is None and live is not None and live["config"] == config:
    st.warning(t("training.stopped", step=live["step"], steps=config.steps))
    fig = make_training_figure(live["losses"], live["accuracies"], steps=config.steps, n_values=config.values)
    plotly(fig, key="training_stopped_chart")
elif results is None:
    st.info(t("training.press_train"))
else:
    losses = {r.scale: r.losses for r in results}
    accuracies = {r.scale: r.accuracies for r in results}
    plotly(make_training_figure(losses, accuracies, steps=config.steps, n_values=config.values), key="training_chart")
    st.caption(t("training.chart_caption", window=TARGET_WINDOW, values=config.values, target=TARGET))
    headers = results_column_names()  # the table's English columns (the CLI's), to show in the reader's words
    runs = results_table(results)
    runs["scale"] = [scale_titles()[r.scale] for r in results]  # results_table's titles are the CLI's English
    formats = {"factor": "%.4f", "loss": "%.4f", "accuracy": "percent", "stuck rows": "percent", "seconds": "%.1f"}
    table(
        runs,
        key="training_table",
        headers=headers,
        hide_index=True,
        column_config={tr(headers[column]): st.column_config.NumberColumn(format=f) for column, f in formats.items()},
    )
    st.caption(
        t("training.table_caption", sequences=settings.TRAIN_EVAL_SEQUENCES, target=TARGET, window=TARGET_WINDOW)
    )
    st.subheader(t("training.look_for"))
    st.markdown("\n\n".join(tr(note) for note in describe_runs(results, config)))

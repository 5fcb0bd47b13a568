"""Training: the tutorial's "loss stuck", trained live under 1/√d_k, no scale and 1/√d_model."""

import streamlit as st

from attnviz import settings, ui
from attnviz.training import (
    TARGET,
    TARGET_WINDOW,
    TrainingConfig,
    describe_runs,
    results_table,
    training_macs,
)
from attnviz.training_figures import make_training_figure

LAST = "training_config"  # the settings this session last trained: the widgets come back to them
LIVE = ui.TRAINING_LIVE  # the curves of the training in progress, which a stop leaves behind
OPTIMISERS = {"sgd": "SGD (plain)", "adam": "Adam"}

st.title("Training: the stuck loss")
st.markdown(
    "One attention layer (our `MultiHeadAttention`, d_model = n_head × d_k) learns **key-value retrieval**: a "
    "sequence holds pairs of a key and a value, the query is one of the keys, and the answer is its value. The "
    "pair sits at a random position, so only attention can find it: the query must match its key by q·k. Three "
    "runs share the seed, so the same initial weights and the same batches; only the factor on the scores "
    "differs: **1/√d_k**, **none**, and **1/√d_model**, the classic bug. Without the scale, q·k grows as √d_k "
    "and the softmax starts saturated; the tutorial says the loss then gets stuck. Here you can check it."
)
ui.frame_settings()


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
cols[0].number_input("d_k (head_dim)", d_k.low, d_k.high, step=8, key="training_d_k")
cols[1].number_input("n_head", n_head.low, n_head.high, key="training_n_head")
cols[2].number_input("steps", steps.low, steps.high, step=50, key="training_steps")
cols[3].selectbox(
    "optimiser",
    list(OPTIMISERS),
    format_func=OPTIMISERS.get,
    key="training_optimiser",
    on_change=_default_learning_rate,
)
cols[4].select_slider("learning rate", settings.TRAIN_LEARNING_RATES, key="training_lr", format_func="{:g}".format)
cols[5].number_input("seed", settings.SEED.low, settings.SEED.high, key="training_seed")
try:
    config = TrainingConfig(
        head_dim=int(st.session_state.training_d_k),
        n_head=int(st.session_state.training_n_head),
        steps=int(st.session_state.training_steps),
        learning_rate=float(st.session_state.training_lr),
        optimiser=st.session_state.training_optimiser,
        seed=int(st.session_state.training_seed),
    )
except ValueError as err:
    st.error(f"Invalid training settings: {err}")
    st.stop()
st.caption(
    f"d_model = {config.n_head} × {config.head_dim} = {config.d_model}; {config.pairs} pairs a sequence, drawn from "
    f"{config.keys} keys and {config.values} values; batches of {config.batch}; the three runs take turns, one step "
    f"each. This training needs {training_macs(config) / 1e12:.1f} T multiply-adds; one request may use "
    f"{settings.TRAIN_MAX_MACS / 1e12:g} T, about 45 s on an idle 2-core CPU."
)


cache = ui.finished_trainings()
cached = config in cache
results = None
if st.button("Train", key="training_train", type="primary") or cached:
    results = cache.get_or_compute(
        config, lambda: ui.train_live(config)
    )  # a Stop interrupts it (a rerun): nothing is stored
    st.session_state[LAST] = config
    st.session_state.pop(LIVE, None)
if cached:
    st.caption("These settings were trained before on this server: the results below come from the cache.")

live = st.session_state.get(LIVE)
if results is None and live is not None and live["config"] == config:
    st.warning(
        f"Stopped after step {live['step']} of {config.steps}: the curves so far are below. A stopped training is not "
        "kept; press **Train** to run it in full."
    )
    fig = make_training_figure(live["losses"], live["accuracies"], steps=config.steps, n_values=config.values)
    ui.plotly(fig, key="training_stopped_chart")
elif results is None:
    st.info(
        "Press **Train** to train the three runs (the defaults take about 20 s on a 2-core CPU). The loss and "
        "accuracy are drawn as they train; **Stop** ends it early."
    )
else:
    losses = {r.scale: r.losses for r in results}
    accuracies = {r.scale: r.accuracies for r in results}
    ui.plotly(
        make_training_figure(losses, accuracies, steps=config.steps, n_values=config.values), key="training_chart"
    )
    st.caption(
        f"Each line is the mean of the last {TARGET_WINDOW} steps, measured on each step's fresh batch before the "
        f"update. Dotted: the loss of a uniform guess over {config.values} values (ln {config.values}), and "
        f"{TARGET:.0%} accuracy."
    )
    st.dataframe(
        results_table(results),
        key="training_table",
        hide_index=True,
        column_config={
            "factor": st.column_config.NumberColumn(format="%.4f"),
            "loss": st.column_config.NumberColumn(format="%.4f"),
            "accuracy": st.column_config.NumberColumn(format="percent"),
            "stuck rows": st.column_config.NumberColumn(format="percent"),
            "seconds": st.column_config.NumberColumn(format="%.1f"),
        },
    )
    st.caption(
        f"loss and accuracy: on {settings.TRAIN_EVAL_SEQUENCES:,} held-out sequences, after the last step. "
        f"steps to {TARGET:.0%}: when the batch accuracy's {TARGET_WINDOW}-step mean first reached it. The attention "
        "is averaged over those "
        "sequences and the heads, before the first step (start) and after the last (end); stuck rows: a largest "
        "weight of 0.9 or more on a pair that does not hold the answer."
    )
    st.subheader("What to look for")
    st.markdown("\n\n".join(describe_runs(results, config)))

"""Cost: why long attention needs tiling, measured on this machine, and tiling drawn on a small example."""

import streamlit as st

from attnviz import cost, ui
from attnviz.figures import make_cost_figure, make_tiling_figure

st.title("Cost: why long attention needs tiling")
st.markdown(
    "Plain attention builds the whole $n \\times n$ matrix of scores, so its memory grows as $n^2$: one layer of "
    "SmolLM2 (9 heads) at 8,192 tokens needs 4.8 GB for its scores and weights. FlashAttention never builds it: it "
    "walks over the keys in blocks and keeps a running softmax, so memory grows as $n$. attnviz's capture does the "
    "same, one block of queries at a time, and keeps only per-row statistics and pooled maps."
)
settings = ui.frame_settings()
device = settings.spec.device if settings.spec else "cpu"

st.subheader("Measured: time and peak memory against n")
st.caption(
    f"One causal attention layer with SmolLM2's shape ({cost.N_HEAD} query heads, {cost.N_KV_HEAD} key/value heads, "
    f"head_dim {cost.HEAD_DIM}), float32, on **{device}**. The naive path runs up to {cost.NAIVE_MAX_TOKENS:,} "
    "tokens; beyond, its memory is predicted. On the CPU the measurement runs in a process of its own."
)


@st.cache_data(max_entries=4, show_spinner=False)
def measured(device: str) -> list[dict]:
    if device == "cpu":
        return cost.measure_in_child(cost.SIZES)
    return cost.measure(cost.SIZES, device)


if st.button("Measure on this machine (about 10 s)", key="cost_measure") or st.session_state.get("cost_done"):
    with st.spinner("Measuring…"):
        try:
            rows = measured(device)
        except RuntimeError as err:
            st.error(str(err))
            st.stop()
    st.session_state.cost_done = True
    limit = cost.naive_limit(cost.available_bytes(device))
    top = max(cost.SIZES[-1], min(limit, 4 * cost.SIZES[-1]))
    predicted = [(n, cost.naive_bytes(n) / 2**20) for n in (cost.NAIVE_MAX_TOKENS, cost.SIZES[-1], top)]
    left, right = st.columns(2)
    with left:
        ui.plotly(make_cost_figure(rows, "seconds", cost.PATH_TITLES), key="cost_time")
    with right:
        fig = make_cost_figure(rows, "peak_mb", cost.PATH_TITLES, predicted=predicted, limit=limit)
        ui.plotly(fig, key="cost_memory")
    st.caption(
        f"With the memory free on this {device} now, the naive path stops fitting at about n = {limit:,} tokens "
        "for one layer. The fused kernel and the chunked capture grow linearly: the chunked capture does more work "
        "per weight (it keeps every statistic and pooled map) but never holds the matrix."
    )
    st.dataframe(rows, key="cost_table", hide_index=True)

st.subheader("Tiling: the same softmax, one key block at a time")
cols = st.columns(3)
n_keys = cols[0].slider("Keys", 4, 64, 24, key="cost_keys")
block = cols[1].slider("Key block", 1, 16, 8, key="cost_block")
seed = cols[2].number_input("Seed", 0, 10_000, 0, key="cost_seed")
example = cost.tiling_example(n_keys, block, int(seed))
ui.plotly(make_tiling_figure(example.steps, example.weights), key="cost_tiling")
st.metric("max |tiled output − plain output|", f"{example.max_difference:.1e}")
st.caption(
    f"After each block the running max m and normaliser l = Σ exp(s − m) are updated, and what was summed so far is "
    f"rescaled by exp(m_old − m_new). Only a 1 × {block} tile of scores is held at a time instead of 1 × {n_keys}; "
    "at the end, o / l is exactly the plain softmax's output. This is `attnviz.cost.online_softmax_attention`."
)

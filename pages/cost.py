"""Cost: why long attention needs tiling, measured on this machine, and tiling drawn on a small example."""

import pandas as pd
import streamlit as st

from attnviz.app.loading import cached_job
from attnviz.app.navigation import frame_settings
from attnviz.app.widgets import plotly, show_error, table
from attnviz.figures.cost import make_cost_figure, make_tiling_figure
from attnviz.i18n.translate import t
from attnviz.labs.cost import paths as cost

st.title(t("cost.title"))
st.markdown(t("cost.intro"))
st.caption(t("cost.own_inputs"))  # the sidebar's text and model play no part here: say so before anything runs
settings = frame_settings()
device = settings.spec.device if settings.spec else "cpu"

st.subheader(t("cost.measured_header"))
st.caption(
    t(
        "cost.measured_caption",
        n_head=cost.N_HEAD,
        n_kv_head=cost.N_KV_HEAD,
        head_dim=cost.HEAD_DIM,
        device=device,
        naive_max=cost.NAIVE_MAX_TOKENS,
    )
)


def measured(device: str, progress) -> list[dict]:
    if device == "cpu":
        return cost.measure_in_child(cost.SIZES, progress=progress)
    return cost.measure(cost.SIZES, device, progress=progress)


if st.button(t("cost.measure"), key="cost_measure") or st.session_state.get("cost_done"):
    try:
        rows = cached_job(
            "cost", (device, cost.SIZES), lambda progress: measured(device, progress), t("cost.measuring")
        )
    except RuntimeError as err:
        show_error(err)
        st.stop()
    st.session_state.cost_done = True
    limit = cost.naive_limit(cost.available_bytes(device))
    top = max(cost.SIZES[-1], min(limit, 4 * cost.SIZES[-1]))
    predicted = [(n, cost.naive_bytes(n) / 2**20) for n in (cost.NAIVE_MAX_TOKENS, cost.SIZES[-1], top)]
    titles = cost.path_titles()
    left, right = st.columns(2)
    with left:
        plotly(make_cost_figure(rows, "seconds", titles), key="cost_time")
    with right:
        fig = make_cost_figure(rows, "peak_mb", titles, predicted=predicted, limit=limit)
        plotly(fig, key="cost_memory")
    st.caption(t("cost.limit_caption", device=device, limit=limit))
    columns = {
        "path": st.column_config.TextColumn(t("cost.column_path")),
        "tokens": st.column_config.NumberColumn(t("cost.column_tokens")),
        "seconds": st.column_config.NumberColumn(t("cost.column_seconds")),
        "peak_mb": st.column_config.NumberColumn(t("cost.column_peak_mb")),
    }
    table(pd.DataFrame(rows), key="cost_table", hide_index=True, column_config=columns)


@st.fragment
def tiling() -> None:
    """The tiling example: its sliders redraw this section only, not the measurement above."""
    st.subheader(t("cost.tiling_header"))
    cols = st.columns(3)
    n_keys = cols[0].slider(t("cost.keys"), 4, 64, 24, key="cost_keys")
    block = cols[1].slider(t("cost.block"), 1, 16, 8, key="cost_block")
    seed = cols[2].number_input(t("cost.seed"), 0, 10_000, 0, key="cost_seed")
    example = cost.tiling_example(n_keys, block, int(seed))
    plotly(make_tiling_figure(example.steps, example.weights), key="cost_tiling")
    st.metric(t("cost.tiling_difference"), f"{example.max_difference:.1e}")
    st.caption(t("cost.tiling_caption", block=block, n_keys=n_keys))


tiling()

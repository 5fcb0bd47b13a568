"""Scaling: softmax entropy with and without 1/√d_k on the model's real q and k, the variance and gradient arguments."""

import streamlit as st

from attnviz import scaling, ui
from attnviz import settings as limits
from attnviz.figures import (
    make_gradient_figure,
    make_head_heatmap_figure,
    make_layer_variance_figure,
    make_scaling_overview_figure,
    make_variance_figure,
)
from attnviz.source import ModelUnavailableError

st.title("Scaling: why attention divides by √d_k")
st.markdown(
    "q·k sums d_k products, so for unit-variance components its variance is d_k. Without the scale the scores grow "
    "with the head size, the softmax **saturates** onto one key and its gradient **vanishes**: the tutorial's "
    "*loss stuck* and *attention collapses onto a few tokens*. Dividing by √d_k brings the variance back to 1. "
    "Dividing by √d_model instead is a classic bug: the scores shrink by √n_head too much and attention goes flat. "
    "Everything below recomputes the model's real q and k (after RoPE, from the same capture as the Heads page) "
    "under each scale."
)
settings = ui.frame_settings()
source = ui.require_source(settings)
ui.require_text(settings)
n_tokens = scaling.tokens_within_budget(source.n_layer, source.n_head, settings.max_tokens)
key = settings.key(n_tokens)
try:
    record = ui.cached("record", key, lambda: source.run(settings.text, n_tokens), "Capturing attention…")
    rows = ui.cached(
        "scaling",
        key,
        lambda: scaling.scaling_rows(record, source.d_model, source.head_dim),
        "Recomputing every head under three scales…",
    )
except (ModelUnavailableError, ValueError) as err:
    st.error(str(err))
    st.stop()
if n_tokens < settings.max_tokens and record.n_input_tokens > n_tokens:
    st.caption(
        f"The scaling lab recomputes every head's scores three times, so it reads the first {n_tokens:,} tokens "
        f"(at most {limits.SCALING_TOKENS:,}, and {limits.SCALING_MAX_CELLS / 1e9:.2f} billion scores over all "
        f"{source.n_layer * source.n_head} heads)."
    )

factors = rows.factors
cols = st.columns(4)
cols[0].metric("d_k (head_dim)", source.head_dim)
cols[1].metric("d_model", source.d_model)
cols[2].metric("1/√d_k", f"{factors['sqrt_dk']:.4f}")
cols[3].metric("1/√d_model", f"{factors['sqrt_dmodel']:.4f}")
threshold = st.slider(
    "A row is saturated when its largest weight reaches", 0.5, 0.99, scaling.SATURATED, 0.01, key="scaling_threshold"
)
table = rows.table(threshold)

st.subheader("Every head under the three scales")
stat = st.radio(
    "Show",
    ["saturated_share", "entropy_norm"],
    key="scaling_stat",
    horizontal=True,
    format_func={"saturated_share": "share of saturated rows", "entropy_norm": "normalised entropy"}.get,
)
ui.plotly(make_scaling_overview_figure(table, stat, scaling.SCALE_TITLES), key="scaling_overview")
collapsed = table[(table["saturated_share_none"] >= 0.5) & (table["saturated_share_sqrt_dk"] < 0.5)]
means = {kind: table[f"saturated_share_{kind}"].mean() for kind in scaling.SCALE_KINDS}
st.caption(
    f"Averaged over heads, {means['sqrt_dk']:.0%} of rows are saturated with 1/√d_k, {means['none']:.0%} with no scale "
    f"and {means['sqrt_dmodel']:.0%} with 1/√d_model. **{len(collapsed)} of {len(table)} heads collapse** (half their "
    "rows or more saturated) only when the scale is missing. A saturated row puts its weight on one key: it no "
    "longer mixes the context, and its gradient is close to zero."
)
with st.expander("The table, every head"):
    st.dataframe(table, key="scaling_table", hide_index=True, width="stretch")

st.subheader("One head under each scale")
layer, head = ui.layer_head_picker(record.n_layer, record.n_head, key="scaling", with_mean=False)
multiple = st.select_slider(
    "Your scale, as a multiple of 1/√d_k",
    options=scaling.SLIDER_MULTIPLES,
    value=1.0,
    key="scaling_multiple",
    format_func=lambda m: f"{m:g}×",
)
side = min(record.q_len, limits.SCALING_VIEW_TOKENS)
labels = record.labels()[:side]
shown = {**{kind: factors[kind] for kind in scaling.SCALE_KINDS}, "yours": factors["sqrt_dk"] * multiple}
titles = {**scaling.SCALE_TITLES, "yours": f"{multiple:g} × 1/√d_k"}
panels = st.columns(len(shown))
for panel, (kind, factor) in zip(panels, shown.items(), strict=True):
    stats = scaling.head_row_stats(record, layer, head, factor, threshold)
    weights = scaling.head_under_scale(record, layer, head, factor, (0, side), (0, side))
    with panel:
        fig = make_head_heatmap_figure(
            weights, labels, labels, title=titles[kind], mask=record.mask(layer, (0, side), (0, side))
        )
        fig.update_layout(
            height=420,
            margin={"t": 40},
            xaxis={"showticklabels": False, "title": {"text": "key"}, "side": "bottom"},
            yaxis={"showticklabels": side <= 40},
        )
        if kind != "yours":
            fig.update_traces(showscale=False)  # one colour scale for all four: its bar is drawn once, on the right
        ui.plotly(fig, key=f"scaling_head_{kind}")
        st.caption(
            f"entropy {stats['entropy']:.2f} nats ({stats['entropy_norm']:.0%} of uniform), "
            f"{stats['saturated_share']:.0%} of rows saturated"
        )
st.caption(
    f"One colour scale for all four. Queries and keys 0–{side - 1} at full resolution"
    + (f" (of {record.q_len:,}; each row is normalised over all its keys)." if side < record.q_len else ".")
    + " Without the scale the rows turn one-hot; with 1/√d_model they blur towards uniform."
)

st.subheader("The variance argument, measured")
left, right = st.columns(2)
with left:
    ui.plotly(make_variance_figure(scaling.random_variance()), key="scaling_variance_random")
    st.caption(
        "Random q and k with unit-variance components: Var(q·k) follows y = d_k exactly, and dividing by √d_k holds "
        "it at 1 whatever the head size."
    )
with right:
    layers = rows.layer_variance()
    ui.plotly(make_layer_variance_figure(layers, source.head_dim), key="scaling_variance_layers")
    st.caption(
        f"This model's real q and k are not unit-variance: Var(q·k)/d_k ranges from {layers['ratio_to_dk'].min():.2f} "
        f"to {layers['ratio_to_dk'].max():.2f} over its layers (1 would be unit variance). Trained weights learn "
        "their own sharpness on top of the scale, so 1/√d_k sets the starting point, not the final temperature."
    )

st.subheader("The gradient argument, measured on this head's real scores")
curve = ui.cached(
    "gradient",
    (*key, layer, head),
    lambda: scaling.gradient_curve(record, layer, head, scaling.gradient_multiples(factors)),
    "Measuring gradients…",
)
markers = {kind: factors[kind] / factors["sqrt_dk"] for kind in scaling.SCALE_KINDS}
ui.plotly(make_gradient_figure(curve, markers, scaling.SCALE_TITLES), key="scaling_gradient")
st.caption(
    "The softmax's Jacobian J = diag(p) − ppᵀ is what passes gradient back to the scores. As the scale grows the rows "
    "saturate and J shrinks towards zero: the dashed line is the share of rows that pass almost no gradient "
    f"(‖J‖ < {scaling.VANISHING}). The gradient reaching q is J's output times the scale, so a larger scale stops "
    "buying anything once rows saturate: that is the stuck loss. "
    f"Averaged over up to {scaling.GRADIENT_ROWS} rows of L{layer} H{head}, with a fixed random upstream gradient."
)

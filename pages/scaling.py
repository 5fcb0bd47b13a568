"""Scaling: softmax entropy with and without 1/√d_k on the model's real q and k, the variance and gradient arguments."""

import streamlit as st

from attnviz import settings as limits
from attnviz.app.loading import cached, cached_job, require_qk, require_source, require_text, unknown_warning
from attnviz.app.navigation import frame_settings
from attnviz.app.widgets import layer_head_picker, plotly, show_error, show_info, table
from attnviz.errors import ModelUnavailableError
from attnviz.figures.base import column_width, make_head_heatmap_figure
from attnviz.figures.scaling import (
    make_gradient_figure,
    make_layer_variance_figure,
    make_scaling_overview_figure,
    make_variance_figure,
)
from attnviz.i18n.message import msg
from attnviz.i18n.translate import t
from attnviz.labs import scaling

PANEL_SIDE = 420  # pixels a side of each one-head panel, two to a row

st.title(t("scaling.title"))
st.markdown(t("scaling.intro"))
settings = frame_settings()
source = require_source(settings)
require_qk(source)  # both recompute the weights from the model's q and k
require_text(settings)
n_tokens = scaling.tokens_within_budget(source.n_layer, source.n_head, settings.max_tokens)
key = settings.key(n_tokens)
try:
    record = cached_job(
        "record", key, lambda progress: source.run(settings.text, n_tokens, progress=progress), t("scaling.capturing")
    )
    if len(record.tokens) < 2:  # one key per row: every scale gives weight 1, nothing saturates or flattens
        st.info(t("sources.single_token"))
        st.stop()
    rows = cached_job(
        "scaling",
        key,
        lambda progress: scaling.scaling_rows(record, source.d_model, source.head_dim, progress, device=source.device),
        t("scaling.recomputing"),
    )
except (ModelUnavailableError, ValueError) as err:
    show_error(err)
    st.stop()
unknown_warning(record.tokens, record.model_name)
if n_tokens < settings.max_tokens and record.n_input_tokens > n_tokens:
    st.caption(
        t(
            "scaling.truncated",
            n_tokens=n_tokens,
            max_tokens=limits.SCALING_TOKENS,
            billions=limits.SCALING_MAX_CELLS / 1e9,
            n_heads=source.n_layer * source.n_head,
        )
    )

factors = rows.factors
cols = st.columns(4)
cols[0].metric("d_k (head_dim)", source.head_dim)
cols[1].metric("d_model", source.d_model)
cols[2].metric("1/√d_k", f"{factors['sqrt_dk']:.4f}")
cols[3].metric("1/√d_model", f"{factors['sqrt_dmodel']:.4f}")
threshold = st.slider(t("scaling.threshold"), 0.5, 0.99, scaling.SATURATED, 0.01, key="scaling_threshold")
heads = rows.table(threshold)  # one row per head: its statistics under each scale

st.subheader(t("scaling.every_head"))
stat = st.radio(
    t("scaling.show"),
    ["saturated_share", "entropy_norm"],
    key="scaling_stat",
    horizontal=True,
    format_func=lambda name: t(f"scaling.stat_{name}"),
)
scale_titles = scaling.scale_titles()  # messages: each figure renders them in the reader's language
plotly(make_scaling_overview_figure(heads, stat, scale_titles), key="scaling_overview")
collapsed = heads[(heads["saturated_share_none"] >= 0.5) & (heads["saturated_share_sqrt_dk"] < 0.5)]
means = {kind: heads[f"saturated_share_{kind}"].mean() for kind in scaling.SCALE_KINDS}
st.caption(
    t(
        "scaling.averaged",
        sqrt_dk=means["sqrt_dk"],
        none=means["none"],
        sqrt_dmodel=means["sqrt_dmodel"],
        collapsed=len(collapsed),
        n_heads=len(heads),
    )
)
with st.expander(t("scaling.table")):
    table(heads, key="scaling_table", hide_index=True, width="stretch")

st.subheader(t("scaling.one_head"))
layer, head = layer_head_picker(record.n_layer, record.n_head, key="scaling", with_mean=False)
multiple = st.select_slider(
    t("scaling.your_scale"),
    options=scaling.SLIDER_MULTIPLES,
    value=1.0,
    key="scaling_multiple",
    format_func=lambda m: f"{m:g}×",
)
side = min(record.q_len, limits.SCALING_VIEW_TOKENS)
labels = record.labels()[:side]
shown = {**{kind: factors[kind] for kind in scaling.SCALE_KINDS}, "yours": factors["sqrt_dk"] * multiple}
titles = {**scale_titles, "yours": f"{multiple:g} × 1/√d_k"}
panels = [panel for _ in range(0, len(shown), 2) for panel in st.columns(2)]  # two a row: square, labelled cells
for panel, (kind, factor) in zip(panels, shown.items(), strict=False):
    stats = scaling.head_row_stats(record, layer, head, factor, threshold, device=source.device)
    weights = scaling.head_under_scale(record, layer, head, factor, (0, side), (0, side), device=source.device)
    with panel:
        fig = make_head_heatmap_figure(
            weights,
            labels,
            labels,
            title=titles[kind],
            mask=record.mask(layer, (0, side), (0, side)),
            max_side=PANEL_SIDE,
            max_width=column_width(2),
        )
        plotly(fig, key=f"scaling_head_{kind}")
        st.caption(
            t(
                "scaling.panel_stats",
                entropy=stats["entropy"],
                entropy_norm=stats["entropy_norm"],
                saturated_share=stats["saturated_share"],
            )
        )
st.caption(
    t("scaling.panels_cut", last=side - 1, q_len=record.q_len)
    if side < record.q_len
    else t("scaling.panels_full", last=side - 1)
)

st.subheader(t("scaling.variance"))
left, right = st.columns(2)
with left:
    plotly(make_variance_figure(scaling.random_variance()), key="scaling_variance_random")
    st.caption(t("scaling.variance_random"))
with right:
    layers = rows.layer_variance()
    plotly(make_layer_variance_figure(layers, source.head_dim), key="scaling_variance_layers")
    st.caption(t("scaling.variance_model", low=layers["ratio_to_dk"].min(), high=layers["ratio_to_dk"].max()))

st.subheader(t("scaling.gradient"))
curve = cached(
    "gradient",
    (*key, layer, head),
    lambda: scaling.gradient_curve(record, layer, head, scaling.gradient_multiples(factors), device=source.device),
    t("scaling.measuring_gradients"),
)
if curve is None:
    show_info(msg("page_extremes.no_gradient_rows", layer=layer))
    st.stop()
markers = {kind: factors[kind] / factors["sqrt_dk"] for kind in scaling.SCALE_KINDS}
plotly(make_gradient_figure(curve, markers, scale_titles), key="scaling_gradient")
st.caption(
    t("scaling.gradient_caption", vanishing=scaling.VANISHING, rows=scaling.GRADIENT_ROWS, layer=layer, head=head)
)

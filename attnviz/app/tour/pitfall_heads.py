"""The tour's step "too many heads on small data": a heads sweep trained live (:mod:`attnviz.labs.tour.heads_sweep`).

No page computes this sweep (the step links to the Training page, whose model it trains): its result is cached
under its own kind, ``tour_heads_sweep``, keyed by the sweep's config. It does not depend on the text, so one
computation at start serves every reader and language. The setting is the number of heads; the chart is the
trained heads' similarity matrix at that number (the Head roles page's figure), beside the sweep's curve.
"""

from __future__ import annotations

import streamlit as st

from attnviz import settings as limits
from attnviz.app.loading import cached_job, result_cache
from attnviz.app.tour.context import StepView, TourContext, say_number
from attnviz.app.widgets import plotly
from attnviz.figures.head_roles import make_head_similarity_figure
from attnviz.figures.tour import highlight_box, highlight_cell, make_heads_sweep_figure, mark_x
from attnviz.i18n.translate import t, tr
from attnviz.labs.tour.heads_sweep import (
    HeadsSweep,
    SweepConfig,
    SweepPoint,
    heads_sweep,
    sweep_finding,
    sweep_need,
    sweep_number,
    sweep_row,
    sweep_seconds,
)

SWEEP_KIND = "tour_heads_sweep"
SWEEP_CONFIG = SweepConfig()  # read at each call (not bound as a default): tests swap in a smaller sweep


def sweep_key(config: SweepConfig) -> tuple:
    return (config,)


def _compute() -> HeadsSweep:
    """The sweep from the shared cache; computed (its price said first) where no one has yet."""
    config = SWEEP_CONFIG
    key = sweep_key(config)
    price = t("tour_step.pitfall_heads.price", n=len(config.n_heads), seconds=sweep_seconds(config))
    found, _ = result_cache().lookup((SWEEP_KIND, key))
    if not found:
        st.caption(price)
    return cached_job(SWEEP_KIND, key, lambda progress: heads_sweep(config, progress), price, need=sweep_need(config))


def similarity_figure(sweep: HeadsSweep, point: SweepPoint):
    """The Head roles page's similarity matrix of the trained heads, the groups that attend alike framed; where
    none do, the closest two heads framed (the pair nearest to being redundant, still above the threshold)."""
    similarity = point.similarity
    threshold = sweep.config.threshold
    fig = make_head_similarity_figure(
        similarity, threshold=threshold, title=t("tour_step.pitfall_heads.fig_similarity_title", n_head=point.n_head)
    )
    rank = {leaf: i for i, leaf in enumerate(similarity.order)}
    groups = similarity.groups(threshold)
    for group in groups:
        highlight_box(fig, rank[group[0]] - 0.5, rank[group[-1]] + 0.5, rank[group[0]] - 0.5, rank[group[-1]] + 0.5)
    if not groups and point.closest is not None:
        a, b, _ = point.closest
        highlight_cell(fig, rank[a], rank[b])
        highlight_cell(fig, rank[b], rank[a])
    return fig


def curve_figure(sweep: HeadsSweep, n_head: int):
    """The sweep's loss and distances over the number of heads, the current number marked."""
    threshold = sweep.config.threshold
    names = {
        "loss": t("tour_step.pitfall_heads.fig_loss"),
        "mean": t("tour_step.pitfall_heads.fig_mean"),
        "closest": t("tour_step.pitfall_heads.fig_closest"),
        "threshold": t("tour_step.pitfall_heads.fig_threshold", threshold=threshold),
        "heads": t("tour_step.pitfall_heads.fig_heads"),
        "distance": t("tour_step.pitfall_heads.fig_distance"),
    }
    fig = make_heads_sweep_figure(
        sweep.table(), names=names, threshold=threshold, title=t("tour_step.pitfall_heads.fig_curve_title")
    )
    return mark_x(fig, n_head, t("tour_step.pitfall_heads.fig_mark", n_head=n_head))


def draw(ctx: TourContext) -> None:
    sweep = _compute()
    config = sweep.config
    key = ctx.widget_key("n_head")
    chart = st.container()  # the chart first on the page, drawn once the setting below is read
    n_head = st.select_slider(
        t("tour_step.pitfall_heads.setting", d_model=config.d_model),
        options=list(config.n_heads),
        value=config.n_heads[-1],
        key=key,
    )
    point = sweep.point(n_head)
    with chart:
        left, right = st.columns(2)
        with left:
            plotly(similarity_figure(sweep, point), key=ctx.widget_key("similarity"))
        with right:
            plotly(curve_figure(sweep, n_head), key=ctx.widget_key("curve"))
    say_number(tr(sweep_number(sweep, n_head)))
    st.markdown(tr(sweep_finding(sweep)))
    st.caption(
        t(
            "tour_step.pitfall_heads.caption",
            d_model=config.d_model,
            steps=config.steps,
            train=config.train_sequences,
            held_out=limits.TRAIN_EVAL_SEQUENCES,
        )
    )


def warm(ctx: TourContext) -> None:
    """The default sweep into the shared cache (no text in it: one sweep for every example and language)."""
    config = SWEEP_CONFIG
    result_cache().get_or_compute((SWEEP_KIND, sweep_key(config)), lambda: heads_sweep(config))


def row(ctx: TourContext) -> str:
    """The pitfalls table's line: what the sweep found, most heads against fewest."""
    return tr(sweep_row(_compute()))


VIEWS: dict[str, StepView] = {"pitfall_heads": StepView(draw, warm, row)}

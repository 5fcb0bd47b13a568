"""The tour's first steps: the intuition (one head's weights, one query's row), the three steps of scaled
dot-product attention, why divide by √d_k, and the code with its shapes. See :mod:`attnviz.app.tour.context`.

Each step reads what its page computes, under that page's kind and key: the record (``record_for``), the
Walkthrough's walk of one layer (``("walkthrough", (*settings.key(n), layer))``), Scaling's rows and gradient
curve (``("scaling", settings.key(n))``, ``("gradient", (*key, layer, head))``). Which head and query a step opens
on is a rule (:mod:`attnviz.labs.tour.basics`), so the server's warm-up computes exactly what a reader first sees.
"""

from __future__ import annotations

import math
from typing import Any

import streamlit as st

from attnviz import settings as limits
from attnviz.app.loading import cached, cached_job, record_job
from attnviz.app.state import valid_choice
from attnviz.app.tour.context import StepView, TourContext, price_first, say_number, warm_result
from attnviz.app.widgets import plotly
from attnviz.core.token_display import markdown_text, plain_text
from attnviz.figures.base import column_width, head_label, make_head_heatmap_figure
from attnviz.figures.heads import make_row_figure
from attnviz.figures.scaling import make_gradient_figure, make_scaling_overview_figure
from attnviz.figures.tour import highlight_cell, highlight_row, mark_x
from attnviz.figures.walkthrough import make_step_figure
from attnviz.i18n.translate import t, tr
from attnviz.labs import scaling
from attnviz.labs.tour import basics
from attnviz.labs.walkthrough import views
from attnviz.labs.walkthrough.steps import walk_source
from attnviz.models.record import AttentionRecord, short_text, token_labels


def _token(tokens, i: int) -> str:
    """Token ``i``'s text for a sentence in Markdown: cut short, escaped (user text is data)."""
    return markdown_text(short_text(tokens[i].text))


def _one_token(record: AttentionRecord) -> bool:
    """A one-token text: every row has one key, weight 1: nothing to show but that, which is said."""
    if record.q_len < 2:
        st.info(t("tour_basics.one_token"))
        return True
    return False


def _choose(ctx: TourContext, name: str, options: list, default, label: str, fmt) -> Any:
    key = ctx.widget_key(name)
    valid_choice(key, options, default)
    return st.selectbox(label, options, key=key, format_func=fmt)


def _layer_head(ctx: TourContext, n_layer: int, n_head: int, default: tuple[int, int]) -> tuple[int, int]:
    """The step's layer and head, opened on ``default`` (the step's rule)."""
    cols = st.columns(2)
    with cols[0]:
        layer = _choose(ctx, "layer", list(range(n_layer)), default[0], t("views.layer"), lambda i: f"L{i}")
    with cols[1]:
        head = _choose(ctx, "head", list(range(n_head)), default[1], t("views.head"), head_label)
    return layer, head


def _query(ctx: TourContext, labels: list[str]) -> int:
    """The query token (its row), the last by default: it sees every key."""
    n = len(labels)
    return _choose(ctx, "query", list(range(n)), n - 1, t("tour_basics.query"), lambda i: labels[i])


# -- 1. intuition: one head's weights, one query's row ---------------------------------------------------------


def _warm_record(ctx: TourContext) -> AttentionRecord:
    return warm_result("record", ctx.settings.key(), lambda: record_job(ctx.source, ctx.settings)(None))


def intuition_warm(ctx: TourContext) -> None:
    _warm_record(ctx)  # the step reads the record alone: its head and row are cut from it as it draws


def intuition_draw(ctx: TourContext) -> None:
    price_first(ctx, ("record", ctx.settings.key()))
    record = ctx.record()
    if _one_token(record):
        return
    chart = st.container()
    layer, head = _layer_head(ctx, record.n_layer, record.n_head, basics.clear_head(record.statistics))
    labels = record.labels()
    query = _query(ctx, labels)
    weights, mask = record.weights(layer, head), record.mask(layer)  # (T, T) each
    story = basics.row_story(weights, query, mask)
    with chart:
        fig = make_head_heatmap_figure(
            weights, labels, labels, title=f"L{layer} {head_label(head)}", mask=mask, max_width=column_width(1)
        )
        highlight_row(fig, query, record.k_len)
        highlight_cell(fig, query, story.top[0][0])
        plotly(fig, key=ctx.widget_key("chart"))
        # the framed row on its own, as the Heads page draws a query's row: the weights the average uses
        row = make_row_figure(weights[query], labels, visible=mask[query], title=plain_text(labels[query]))
        plotly(mark_x(row, story.top[0][0]), key=ctx.widget_key("row"))
    keys = t("tour_basics.and").join(
        t("tour_step.intuition.key", token=_token(record.tokens, k), weight=w) for k, w in story.top
    )
    say_number(
        t(
            "tour_step.intuition.number",
            query=_token(record.tokens, query),
            keys=keys,
            total=story.total,
            layer=layer,
            head=head_label(head),
        )
    )


# -- 2. the three steps, and 5. the code: the Walkthrough page's walk of one layer ------------------------------


def _walk_key(ctx: TourContext, layer: int) -> tuple:
    return (*ctx.settings.key(min(ctx.settings.max_tokens, limits.PARITY_TOKENS)), layer)  # as pages/walkthrough.py


def _walk_job(ctx: TourContext, layer: int):
    n_tokens = min(ctx.settings.max_tokens, limits.PARITY_TOKENS)
    return lambda progress=None: walk_source(ctx.source, ctx.settings.text, n_tokens, layer, progress)


def _walk(ctx: TourContext, layer: int):
    return cached_job("walkthrough", _walk_key(ctx, layer), _walk_job(ctx, layer), t("walkthrough.running"))


def walk_warm(ctx: TourContext) -> None:
    layer, _ = basics.clear_head(_warm_record(ctx).statistics)  # the head step 1 opened on, walked on
    warm_result("walkthrough", _walk_key(ctx, layer), _walk_job(ctx, layer))


def _walk_setup(ctx: TourContext):
    """The record (for the default head), the layer and head, the walk: shared by the three steps and the code."""
    price_first(ctx, ("record", ctx.settings.key()))
    record = ctx.record()
    return record, basics.clear_head(record.statistics)


def three_steps_draw(ctx: TourContext) -> None:
    record, default = _walk_setup(ctx)
    if _one_token(record):
        return
    chart = st.container()
    layer, head = _layer_head(ctx, record.n_layer, record.n_head, default)
    price_first(ctx, ("walkthrough", _walk_key(ctx, layer)))
    walk = _walk(ctx, layer)
    names = {key: t(f"tour_basics.sub_{key}") for key in basics.SUB_STEPS}
    key = ctx.widget_key("sub")
    valid_choice(key, list(names), basics.SUB_STEPS[0])
    sub = st.radio(t("tour_basics.sub_step"), list(names), key=key, format_func=names.get, horizontal=True)
    labels = token_labels(walk.tokens)
    query = _query(ctx, labels)
    step = walk.step(sub)
    shown = views.step_view(step, head, walk, numbers=False)
    with chart:
        fig = make_step_figure(
            shown.values,
            shown.row_labels,
            shown.col_labels,
            title=plain_text(tr(views.view_title(step, head))),
            axes=(tr(shown.axes[0]), tr(shown.axes[1])),
            weights=shown.weights,
            visible=shown.visible,
        )
        highlight_row(fig, query, shown.values.shape[1])
        plotly(fig, key=ctx.widget_key("chart"))
    n = basics.sub_step_numbers(walk, head, query)
    say_number(
        t(
            f"tour_step.three_steps.number_{sub}",
            query=_token(walk.tokens, query),
            low=n.raw_low,
            high=n.raw_high,
            scale=n.scale,
            d_k=walk.head_dim,
            scaled_low=n.scaled_low,
            scaled_high=n.scaled_high,
            max_weight=n.max_weight,
            top=_token(walk.tokens, n.top_key),
            norm=n.out_norm,
            head_dim=walk.head_dim,
        )
        + " "
        + t("tour_step.three_steps.parity", output_diff=n.output_diff, weights_diff=n.weights_diff, layer=layer)
    )


def code_draw(ctx: TourContext) -> None:
    _, (layer, _) = _walk_setup(ctx)  # the intuition step's layer: every head's code, one walk
    price_first(ctx, ("walkthrough", _walk_key(ctx, layer)))
    walk = _walk(ctx, layer)
    rows = {key: (shape, changed) for key, shape, changed in basics.step_shapes(walk)}
    step_names = {step.key: f"{step.number}. {tr(step.title)}" for step in walk.steps}
    code = st.container()
    key = ctx.widget_key("part")
    valid_choice(key, list(step_names), "split")
    part = st.select_slider(t("tour_basics.code_step"), list(step_names), key=key, format_func=step_names.get)
    step = walk.step(part)
    shape, changed = rows[part]
    with code:
        st.code(tr(views.code_block(step)), language="python", wrap_lines=True)
        dims = ", ".join(f"**{n}**" if i in changed else str(n) for i, n in enumerate(shape))
        st.markdown(t("tour_basics.shape_line", name=step.shown, dims=dims, axes=tr(step.axes)))
        st.caption(f"{tr(views.shapes_caption(step))}. {tr(step.change)}")
    say_number(
        t(
            "tour_step.code.number",
            step=step_names[part],
            name=step.shown,
            shape=str(shape),
            changed=", ".join(str(shape[i]) for i in changed) or t("tour_basics.nothing_changed"),
            T=len(walk.tokens),
            n_head=walk.n_head,
            n_kv_head=walk.n_kv_head,
            head_dim=walk.head_dim,
            output_diff=walk.output_diff,
            weights_diff=walk.weights_diff,
        )
    )


# -- 3. why √d_k: Scaling's rows and one head's gradient curve -------------------------------------------------


def _scaling_key(ctx: TourContext) -> tuple:
    source = ctx.source
    return ctx.settings.key(scaling.tokens_within_budget(source.n_layer, source.n_head, ctx.settings.max_tokens))


def _scaling_jobs(ctx: TourContext):
    """The record, rows and gradient-curve jobs of pages/scaling.py for this context, under its keys."""
    source, key = ctx.source, _scaling_key(ctx)

    def record_job_(progress=None):
        return source.run(ctx.settings.text, key[2], progress=progress)

    def rows_job(record):
        return lambda progress=None: scaling.scaling_rows(
            record, source.d_model, source.head_dim, progress, device=source.device
        )

    def curve_job(record, rows, layer, head):
        multiples = scaling.gradient_multiples(rows.factors)
        return lambda: scaling.gradient_curve(record, layer, head, multiples, device=source.device)

    return key, record_job_, rows_job, curve_job


def scale_warm(ctx: TourContext) -> None:
    key, record_job_, rows_job, curve_job = _scaling_jobs(ctx)
    record = warm_result("record", key, record_job_)
    if record.q_len < 2:
        return
    rows = warm_result("scaling", key, rows_job(record))
    layer, head = basics.scale_head(rows.table(scaling.SATURATED))
    warm_result("gradient", (*key, layer, head), curve_job(record, rows, layer, head))


def scale_draw(ctx: TourContext) -> None:
    key, record_job_, rows_job, curve_job = _scaling_jobs(ctx)
    price_first(ctx, ("record", key), ("scaling", key))
    record = cached_job("record", key, record_job_, t("scaling.capturing"))
    if _one_token(record):
        return
    rows = cached_job("scaling", key, rows_job(record), t("scaling.recomputing"))
    heads = rows.table(scaling.SATURATED)
    counts = basics.collapsed_counts(heads)
    overview, gradient = st.container(), st.container()
    layer, head = _layer_head(ctx, record.n_layer, record.n_head, basics.scale_head(heads))
    factors = rows.factors
    named = {1.0: t("tour_basics.multiple_dk"), math.sqrt(rows.head_dim): t("tour_basics.multiple_none")}
    options = basics.scale_multiples(rows.head_dim)
    slider = ctx.widget_key("multiple")
    valid_choice(slider, options, 1.0)
    multiple = st.select_slider(
        t("tour_basics.multiple"),
        options=options,
        key=slider,
        format_func=lambda m: f"{m:g}×" + (f" = {named[m]}" if m in named else ""),
    )
    curve = cached(
        "gradient", (*key, layer, head), curve_job(record, rows, layer, head), t("scaling.measuring_gradients")
    )
    titles = scaling.scale_titles()
    with overview:
        fig = make_scaling_overview_figure(heads, "saturated_share", titles)
        for i in range(len(titles)):
            axis = "" if i == 0 else str(i + 1)
            highlight_cell(fig, layer, head, xref=f"x{axis}", yref=f"y{axis}")
        plotly(fig, key=ctx.widget_key("overview"))
    vanishing = basics.vanishing_share(curve, multiple) if curve is not None else None
    if vanishing is None:  # a multiple the page's curve does not hold: the same measurement at that one point
        single = scaling.gradient_curve(record, layer, head, [multiple], device=ctx.source.device)
        vanishing = single.vanishing_share[0] if single is not None else math.nan
    if curve is not None:
        with gradient:
            markers = {kind: factors[kind] / factors["sqrt_dk"] for kind in scaling.SCALE_KINDS}
            fig = make_gradient_figure(curve, markers, titles)
            mark_x(fig, multiple)
            plotly(fig, key=ctx.widget_key("gradient"))
    stats = scaling.head_row_stats(
        record, layer, head, factors["sqrt_dk"] * multiple, scaling.SATURATED, device=ctx.source.device
    )
    say_number(
        t(
            "tour_step.scale.number",
            none=counts["none"],
            sqrt_dk=counts["sqrt_dk"],
            n_heads=counts["n_heads"],
            threshold=scaling.SATURATED,
        )
        + " "
        + t(
            "tour_step.scale.number_multiple",
            multiple=multiple,
            layer=layer,
            head=head_label(head),
            saturated=stats["saturated_share"],
            vanishing=vanishing,
            threshold=scaling.SATURATED,
            norm=scaling.VANISHING,
        )
    )


VIEWS: dict[str, StepView] = {
    "intuition": StepView(intuition_draw, intuition_warm),
    "three_steps": StepView(three_steps_draw, walk_warm),
    "scale": StepView(scale_draw, scale_warm),
    "code": StepView(code_draw, walk_warm),
}

__all__ = ["VIEWS"]

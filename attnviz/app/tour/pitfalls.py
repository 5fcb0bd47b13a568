"""The tour's pitfalls: a table of all five, then four of them reproduced live (the fifth, too many heads, is
:mod:`attnviz.app.tour.pitfall_heads`). See :mod:`attnviz.app.tour.context` for what a view is.

Each step opens on the symptom (no scale, a mask offset by one, the naive path, the no-scale multiple) and its
one setting applies the fix. Results come from the page the step links to, under that page's cache:

- the missing scale: the Training page's three runs of its default config, in the finished-trainings cache
  (:mod:`attnviz.app.training_cache`, keyed by the config);
- O(n²) memory: the Cost page's measurement, ``("cost", (device, SIZES))``;
- the wrong mask: the Mask lab's capture ``("record", settings.key(n))`` and leak test ``("mask_leak", ...)``,
  keyed as that page keys a decode step's mask;
- collapsed weights: Scaling's capture ``("record", settings.key(n))``, with the tour's own counts beside it
  (``tour_collapse``, ``tour_sinks``: no page counts these).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import pandas as pd
import streamlit as st

from attnviz import settings as limits
from attnviz.app.loading import cached, cached_job, result_cache
from attnviz.app.progress import duration_text
from attnviz.app.state import valid_choice
from attnviz.app.tour import pitfall_heads
from attnviz.app.tour.context import StepView, TourContext, pass_seconds, say_number, warm_result
from attnviz.app.training_cache import finished, finished_trainings
from attnviz.app.widgets import in_words, plotly
from attnviz.figures.base import column_width, make_head_heatmap_figure
from attnviz.figures.cost import make_cost_figure
from attnviz.figures.masks import make_leak_figure, make_mask_figure
from attnviz.figures.tour import highlight_column, highlight_rows, highlight_traces
from attnviz.figures.training import make_training_figure
from attnviz.i18n.translate import t, tr
from attnviz.labs import scaling
from attnviz.labs.cost import paths as cost
from attnviz.labs.masks.builder import ALIGNS, decode_mask
from attnviz.labs.masks.doctor import parse_expect
from attnviz.labs.masks.effects import MASK_CUTS, leak_test, mask_digest, meant_keep
from attnviz.labs.tour import pitfalls as lab
from attnviz.labs.tour.steps import PITFALLS
from attnviz.labs.training import runs as training
from attnviz.labs.training.runs import RunResult, TrainingConfig

# the Cost page's measurement on a 2-core CPU: 5.0 s (docs/benchmarks.md), in a child process of its own
MEASURE_SECONDS = 5.0
TRAINING_CONFIG: TrainingConfig | None = None  # None: the Training page's defaults; tests swap in a smaller config


# --- shared -----------------------------------------------------------------------------------------------------


def _lookup(kind: str, key: tuple):
    """A result the warm-up (or a page) computed, or None: the pitfalls table reads, never computes."""
    found, value = result_cache().lookup((kind, key))
    return value if found else None


def _price(ctx: TourContext, kind: str, key: tuple, seconds: float) -> None:
    """Before a computation not done at start: what it costs, in time."""
    if _lookup(kind, key) is None:
        st.caption(t("tour_pitfalls.price", time=duration_text(seconds)))


def _record(ctx: TourContext, n_tokens: int, title: str):
    """The capture a page reads under ``("record", settings.key(n_tokens))``, computed there when missing."""
    key = ctx.settings.key(n_tokens)
    _price(ctx, "record", key, pass_seconds(ctx.source))
    text = ctx.settings.text
    return cached_job("record", key, lambda progress: ctx.source.run(text, n_tokens, progress=progress), title)


def _warm_record(ctx: TourContext, n_tokens: int):
    text = ctx.settings.text
    return warm_result("record", ctx.settings.key(n_tokens), lambda: ctx.source.run(text, n_tokens))


# --- the missing scale: the Training page's runs -------------------------------------------------------------------

SCALE_CHOICES = ("none", "sqrt_dmodel", "sqrt_dk")  # the symptom first, the fix last


def training_config(ctx: TourContext) -> TrainingConfig:
    """The Training page's default config on the tour's device (the page trains on the sidebar's)."""
    return dataclasses.replace(TRAINING_CONFIG or TrainingConfig(), device=str(ctx.spec.device))


def _trainings(ctx: TourContext) -> list[RunResult]:
    config = training_config(ctx)
    done = finished(config)
    if done is not None:
        return done
    st.caption(t("tour_pitfalls.price", time=duration_text(training.training_need(config).seconds)))
    with st.spinner(t("tour_step.pitfall_scale.training")):  # train_scale looked up here: tests count the runs
        return finished_trainings().get_or_compute(config, lambda: training.train_scale(config))


def draw_scale(ctx: TourContext) -> None:
    results = _trainings(ctx)
    config = training_config(ctx)
    chart = st.container()
    titles = scaling.scale_titles()
    key = ctx.widget_key("scale")
    valid_choice(key, SCALE_CHOICES, SCALE_CHOICES[0])
    kind = st.radio(
        t("tour_step.pitfall_scale.setting"),
        SCALE_CHOICES,
        key=key,
        horizontal=True,
        format_func=lambda k: tr(titles[k]),
    )
    losses = {r.scale: r.losses for r in results}
    accuracies = {r.scale: r.accuracies for r in results}
    fig = make_training_figure(losses, accuracies, steps=config.steps, n_values=config.values)
    with chart:
        plotly(highlight_traces(fig, {tr(titles[kind])}), key=ctx.widget_key("chart"))
    say_number(tr(lab.scale_number(results, kind)))
    st.markdown(tr(lab.scale_finding(results)))
    st.caption(t("tour_step.pitfall_scale.caption", steps=config.steps, pairs=config.pairs, d_model=config.d_model))


def warm_scale(ctx: TourContext) -> None:
    config = training_config(ctx)
    finished_trainings().get_or_compute(config, lambda: training.train_scale(config))


def row_scale(ctx: TourContext) -> str:
    done = finished(training_config(ctx))
    return tr(lab.scale_row(done)) if done is not None else t("tour_pitfalls.not_computed")


# --- O(n²) memory: the Cost page's measurement ------------------------------------------------------------------


def _cost_key(ctx: TourContext) -> tuple:
    return (ctx.spec.device, cost.SIZES)  # pages/cost.py's key


def _measured(device) -> Callable[..., list[dict]]:
    def job(progress=None) -> list[dict]:
        if device == "cpu":
            return cost.measure_in_child(cost.SIZES, progress=progress)
        return cost.measure(cost.SIZES, device, progress=progress)

    return job


def draw_memory(ctx: TourContext) -> None:
    key = _cost_key(ctx)
    _price(ctx, "cost", key, MEASURE_SECONDS)
    rows = cached_job("cost", key, _measured(ctx.spec.device), t("cost.measuring"))
    chart = st.container()
    setting = ctx.widget_key("path")
    valid_choice(setting, cost.PATHS, "naive")
    titles = cost.path_titles()
    path = st.radio(t("tour_step.pitfall_memory.setting"), cost.PATHS, key=setting, format_func=lambda p: tr(titles[p]))
    limit = cost.naive_limit(cost.available_bytes(ctx.spec.device))
    top = max(cost.SIZES[-1], min(limit, 4 * cost.SIZES[-1]))
    predicted = [(n, cost.naive_bytes(n) / 2**20) for n in (cost.NAIVE_MAX_TOKENS, cost.SIZES[-1], top)]
    fig = make_cost_figure(rows, "peak_mb", titles, predicted=predicted, limit=limit)
    with chart:
        plotly(highlight_traces(fig, {tr(titles[path])}), key=ctx.widget_key("chart"))
    say_number(tr(lab.memory_number(rows, path)))
    st.markdown(t("tour_step.pitfall_memory.finding", naive=lab.growth_exponent(rows, "naive")))


def warm_memory(ctx: TourContext) -> None:
    warm_result("cost", _cost_key(ctx), _measured(ctx.spec.device))


def row_memory(ctx: TourContext) -> str:
    rows = _lookup("cost", _cost_key(ctx))
    return tr(lab.memory_row(rows)) if rows is not None else t("tour_pitfalls.not_computed")


# --- a wrong causal mask: the Mask lab's leak test -----------------------------------------------------------------

MASK_DEFAULT = "plus_one"  # the symptom: a decode step whose mask is offset by one lets each query see the next key


def mask_tokens(ctx: TourContext) -> int:
    return min(ctx.settings.max_tokens, limits.MASK_TOKENS)  # pages/masks.py's n_tokens


def mask_case(ctx: TourContext, n_tokens: int, align: str):
    """The decode step's mask at ``align``, what it is meant to keep (causal: the Mask lab's meaning of a decode
    step) and the Mask lab's cache key of its leak test."""
    built = decode_mask(n_tokens, lab.decode_queries(n_tokens), align)
    meant = meant_keep(built.keep, parse_expect("causal"))
    key = (*ctx.settings.key(mask_tokens(ctx)), mask_digest(built.acting), mask_digest(meant), "")
    return built, meant, key


def _leak_job(ctx: TourContext, built, meant):
    text, n_tokens, source = ctx.settings.text, mask_tokens(ctx), ctx.source
    return lambda progress=None: leak_test(source, text, n_tokens, built.acting, meant, None, progress=progress)


def draw_mask(ctx: TourContext) -> None:
    record = _record(ctx, mask_tokens(ctx), t("masks.capturing"))
    T = record.q_len
    if T < 3:
        st.info(t("tour_step.pitfall_mask.too_short"))
        return
    chart = st.container()
    setting = ctx.widget_key("align")
    valid_choice(setting, ALIGNS, MASK_DEFAULT)
    align = st.radio(
        t("tour_step.pitfall_mask.setting", q_len=lab.decode_queries(T), cached=T - lab.decode_queries(T)),
        ALIGNS,
        key=setting,
        horizontal=True,
        format_func=lambda a: t(f"mask_decode_lab.align_{a}"),
    )
    built, meant, key = mask_case(ctx, T, align)
    _price(ctx, "mask_leak", key, pass_seconds(ctx.source) * (1 + 2 * MASK_CUTS))  # at most: a run, then one per cut
    leak = cached_job("mask_leak", key, _leak_job(ctx, built, meant), t("masks.leak_spinner"))
    labels = record.labels()
    mask_fig = make_mask_figure(
        built.keep, labels, problems={"future_leak": lab.leaking_cells(built, meant)}, title=t("masks.fig_mask")
    )
    highlight_rows(mask_fig, leak.leaked_rows, T)
    leak_fig = make_leak_figure(leak.change, labels, leak.tolerance, leak.cuts)
    with chart:
        left, right = st.columns(2)
        with left:
            plotly(mask_fig, key=ctx.widget_key("mask"))
        with right:
            plotly(leak_fig, key=ctx.widget_key("leak"))
    say_number(tr(lab.leak_number(leak, built, meant)))
    st.markdown(t(f"tour_step.pitfall_mask.explain_{align}"))


def warm_mask(ctx: TourContext) -> None:
    record = _warm_record(ctx, mask_tokens(ctx))
    if record.q_len < 3:
        return
    for align in ALIGNS:  # four small tests: every setting of the step, and the table's leak and fix
        built, meant, key = mask_case(ctx, record.q_len, align)
        warm_result("mask_leak", key, _leak_job(ctx, built, meant))


def row_mask(ctx: TourContext) -> str:
    record = _lookup("record", ctx.settings.key(mask_tokens(ctx)))
    if record is None or record.q_len < 3:
        return t("tour_pitfalls.not_computed")
    found = {}
    for align in ("plus_one", "right"):
        _, _, key = mask_case(ctx, record.q_len, align)
        found[align] = _lookup("mask_leak", key)
    if any(v is None for v in found.values()):
        return t("tour_pitfalls.not_computed")
    return t(
        "tour_step.pitfall_mask.row",
        leaked=len(found["plus_one"].leaked_rows),
        change=found["plus_one"].max_change,
        fixed=len(found["right"].leaked_rows),
    )


# --- collapsed weights: Scaling's capture, the flags and the sink --------------------------------------------------


def scaling_tokens(ctx: TourContext) -> int:
    return scaling.tokens_within_budget(ctx.source.n_layer, ctx.source.n_head, ctx.settings.max_tokens)


def none_multiple(head_dim: int) -> float:
    """The multiple of 1/√d_k that is no scale at all (√d_k), or the slider's nearest to it."""
    return min(scaling.SLIDER_MULTIPLES, key=lambda m: abs(math.log(m) - 0.5 * math.log(head_dim)))


def _collapsed(ctx: TourContext, record, multiple: float, compute: bool = True):
    key = (*ctx.settings.key(scaling_tokens(ctx)), multiple)
    source = ctx.source

    def count() -> int:
        return lab.collapsed_heads(record, multiple, source.head_dim, source.d_model, device=source.device)

    if not compute:
        return _lookup("tour_collapse", key)
    return cached("tour_collapse", key, count, t("tour_step.pitfall_collapse.counting"))


def _sinks(ctx: TourContext, record):
    key = ctx.settings.key(scaling_tokens(ctx))
    return cached("tour_sinks", key, lambda: lab.collapse(record), t("tour_step.pitfall_collapse.counting"))


def draw_collapse(ctx: TourContext) -> None:
    record = _record(ctx, scaling_tokens(ctx), t("scaling.capturing"))
    if record.q_len < 2:
        st.info(t("sources.single_token"))
        return
    source = ctx.source
    found = _sinks(ctx, record)
    chart = st.container()
    setting = ctx.widget_key("multiple")
    default = none_multiple(source.head_dim)
    valid_choice(setting, scaling.SLIDER_MULTIPLES, default)
    multiple = st.select_slider(
        t("tour_step.pitfall_collapse.setting", none=default),
        options=scaling.SLIDER_MULTIPLES,
        key=setting,
        format_func=lambda m: f"{m:g}×",
    )
    collapsed = _collapsed(ctx, record, multiple)
    if found.head is not None:
        layer, head = found.head
        side = min(record.q_len, limits.SCALING_VIEW_TOKENS)
        labels = record.labels()[:side]
        factor = scaling.scale_factors(source.head_dim, source.d_model)["sqrt_dk"] * multiple
        weights = scaling.head_under_scale(record, layer, head, factor, (0, side), (0, side), device=source.device)
        mask = record.mask(layer, (0, side), (0, side))
        width = column_width(2)
        title = t("tour_step.pitfall_collapse.fig_weights", layer=layer, head=head, multiple=multiple)
        figs = [make_head_heatmap_figure(weights, labels, labels, title=title, mask=mask, max_width=width)]
        if record.has_value_norms:
            # in typical values: what each key adds over the median key's value norm (the lab's `written`), so
            # a sink's column reads 0.07 where its weight reads 1: it takes the weight and adds almost nothing
            typical = record.value_norms(layer, head).median().clamp_min(1e-30)
            moved = record.value_weighted(layer, head, (0, side), (0, side)) / typical
            title = t("tour_step.pitfall_collapse.fig_moved", layer=layer, head=head)
            figs.append(make_head_heatmap_figure(moved, labels, labels, title=title, mask=mask, max_width=width))
        with chart:
            for column, (i, fig) in zip(st.columns(2), enumerate(figs), strict=False):
                with column:
                    plotly(highlight_column(fig, 0, side), key=ctx.widget_key(f"head_{i}"))
    say_number(tr(lab.collapse_number(collapsed, found.n_heads, multiple)))
    st.markdown(tr(lab.collapse_finding(found)))
    st.caption(t("tour_step.pitfall_collapse.other_fixes"))


def warm_collapse(ctx: TourContext) -> None:
    n_tokens = scaling_tokens(ctx)
    record = _warm_record(ctx, n_tokens)
    if record.q_len < 2:
        return
    key = ctx.settings.key(n_tokens)
    source = ctx.source
    warm_result("tour_sinks", key, lambda: lab.collapse(record))
    for multiple in {none_multiple(source.head_dim), 1.0}:  # the default (no scale) and the fix, for the table
        warm_result(
            "tour_collapse",
            (*key, multiple),
            lambda m=multiple: lab.collapsed_heads(record, m, source.head_dim, source.d_model, device=source.device),
        )


def row_collapse(ctx: TourContext) -> str:
    key = ctx.settings.key(scaling_tokens(ctx))
    found = _lookup("tour_sinks", key)
    record = _lookup("record", key)
    at_none = _collapsed(ctx, record, none_multiple(ctx.source.head_dim), compute=False)
    at_one = _collapsed(ctx, record, 1.0, compute=False)
    if found is None or at_none is None or at_one is None:
        return t("tour_pitfalls.not_computed")
    return tr(lab.collapse_row(found, at_none, at_one))


# --- the table of all five -------------------------------------------------------------------------------------


def _open(key: str) -> None:
    st.query_params["step"] = key


def pitfall_rows(ctx: TourContext) -> pd.DataFrame:
    """One row per pitfall: its words, and the live finding each step's ``row`` reads from what was computed."""
    views = {**pitfall_heads.VIEWS, **VIEWS}  # this module's and the heads step's: every pitfall's view
    rows = []
    for key in PITFALLS:
        view = views.get(key)
        try:
            finding = view.row(ctx) if view is not None and view.row is not None else t("tour_pitfalls.not_ready")
        except Exception:  # one row's failure leaves the table
            finding = t("tour_pitfalls.not_ready")
        rows.append(
            {
                "pitfall": t(f"tour_step.{key}.title"),
                "symptom": t(f"tour_pitfalls.{key}.symptom"),
                "cause": t(f"tour_pitfalls.{key}.cause"),
                "fix": t(f"tour_pitfalls.{key}.fix"),
                "finding": finding,
            }
        )
    return pd.DataFrame(rows)


def draw_table(ctx: TourContext) -> None:
    rows = pitfall_rows(ctx)
    headers = {name: f"tour_pitfalls.column_{name}" for name in rows.columns}  # catalogue keys
    # a static table: its cells wrap, so all five columns are read on one screen (a data grid cuts them short)
    st.table(in_words(rows, headers).set_index(t(headers["pitfall"])))
    missing = {t("tour_pitfalls.not_computed"), t("tour_pitfalls.not_ready")}
    ready = sum(finding not in missing for finding in rows["finding"])
    say_number(t("tour_step.pitfalls.number", n=ready, total=len(PITFALLS)))
    cols = st.columns(len(PITFALLS))
    for column, key in zip(cols, PITFALLS, strict=True):
        column.button(
            t(f"tour_step.{key}.title"), key=ctx.widget_key(f"open_{key}"), on_click=_open, args=(key,), width="stretch"
        )


def warm_table(ctx: TourContext) -> None:
    """Nothing of its own: each row is its step's warm-up's."""


VIEWS: dict[str, StepView] = {
    "pitfalls": StepView(draw_table, warm_table),
    "pitfall_scale": StepView(draw_scale, warm_scale, row_scale),
    "pitfall_memory": StepView(draw_memory, warm_memory, row_memory),
    "pitfall_mask": StepView(draw_mask, warm_mask, row_mask),
    "pitfall_collapse": StepView(draw_collapse, warm_collapse, row_collapse),
}

"""The Ablation page's own widgets: one ablation's result, its numbers, where it changed most, the top tokens; and
the single-head sweep, run a pass at a time so that Stop keeps what it did."""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from attnviz.app.head_links import (
    agreement_note,
    estimate_flags,
    estimate_table,
    head_check_note,
    heads_text,
    ranked_heads,
)
from attnviz.app.jobs import PieceJob, about
from attnviz.app.loading import cached, cached_job, result_cache
from attnviz.app.progress import duration_text, probed
from attnviz.app.queue_view import admitted, request_id
from attnviz.app.state import Settings, valid_choice
from attnviz.app.widgets import plotly, table
from attnviz.core.device_speed import device_of
from attnviz.core.token_display import markdown_text, shown_text
from attnviz.figures.ablation import make_ablation_change_figure, make_ablation_sweep_figure
from attnviz.figures.heads_matter import make_head_effect_figure
from attnviz.i18n.translate import t
from attnviz.labs.heads_matter import ablation, attribution, patching
from attnviz.labs.heads_matter.ablation import AblationSweep
from attnviz.labs.heads_matter.agreement import agreement as rank_agreement
from attnviz.labs.heads_matter.agreement import by_size, flag_report, head_check
from attnviz.labs.heads_matter.common import token_limit
from attnviz.labs.heads_matter.effect import AblationResult
from attnviz.models.source import AttentionSource, Capability
from attnviz.settings import ESTIMATE_TOKENS, SWEEP_TOKENS


def show_result(result: AblationResult, name: str) -> None:
    """The losses and mean KL (or the hidden change), the change at each position, the positions that change most,
    and the top next tokens before and after at a position the reader picks (an LM only)."""
    cols = st.columns(3)
    if not result.logits:
        st.caption(t("ablation.encoder_note", name=markdown_text(name)))
        cols[0].metric(t("ablation.hidden_change"), f"{result.hidden_change:.5f}")
    elif result.loss_before is None:
        st.caption(t("ablation.no_loss"))
    else:
        cols[0].metric(t("ablation.loss_before"), f"{result.loss_before:.4f}")
        cols[1].metric(
            t("ablation.loss_after"),
            f"{result.loss_after:.4f}",
            f"{result.loss_after - result.loss_before:+.4f}",
            delta_color="inverse",  # a lower loss is better: green when it goes down
        )
        cols[2].metric(t("ablation.kl_mean"), f"{result.kl_mean:.5f}")
    plotly(make_ablation_change_figure(result), key="ablation_change")
    st.subheader(t("ablation.changed_most"))
    most = pd.DataFrame(
        [(p, result.tokens[p].text, v) for p, v in result.changed_most()], columns=["position", "token", "change"]
    )
    headers = {"position": "ablation.col_position", "token": "ablation.col_token", "change": "ablation.col_change"}
    table(most, key="ablation_most", headers=headers, hide_index=True)
    if result.logits:
        last = len(result.tokens) - 1
        valid_choice("ablation_position", range(0, last + 1), last)
        at = st.number_input(t("ablation.position"), 0, last, key="ablation_position")
        headers = {"token": "ablation.col_token", "probability": "ablation.col_probability"}
        for col, side in zip(st.columns(2), ("top_before", "top_after"), strict=True):
            with col:
                st.caption(t(f"ablation.{side}"))
                top = pd.DataFrame(getattr(result, side)[at], columns=["token", "probability"])
                top["token"] = top["token"].map(lambda text: text if text.strip() else shown_text(text))  # ␣ ⏎
                table(top, key=f"ablation_{side}", headers=headers, hide_index=True)


def limit_text(prefix: str, n_tokens: int, sidebar: int, page: int) -> str:
    """Which limit applies to a page's tokens and why: the sidebar's, when lower than the page's own, or the
    page's, or both (``prefix``: the catalogue's ``<prefix>_sidebar``, ``_page`` and ``_both``)."""
    which = "sidebar" if sidebar < page else "page" if sidebar > page else "both"
    return t(f"{prefix}_{which}", tokens=n_tokens, sidebar=sidebar, page=page)


def show_sweep(sweep: AblationSweep) -> None:
    """The layer x head map (the heads run so far, when stopped) and the heads that matter most, ranked."""
    if not sweep.complete:
        st.warning(t("ablation.sweep_stopped", done=sweep.n_done, total=sweep.n_heads))
    plotly(make_ablation_sweep_figure(sweep), key="ablation_sweep")
    k = sweep.n_heads if sweep.complete else ablation.RANKED_K  # the whole sweep: every head, sortable
    st.subheader(t("ablation.ranked", k=k))
    ranked = sweep.ranked(k)
    if not ranked:
        st.info(t("ablation.ranked_none"))
        return
    top = pd.DataFrame(ranked, columns=["layer", "head", "effect"])
    top["effect"] = top["effect"].map(lambda v: float(f"{v:.4g}"))  # 4 significant digits, as the map's hover
    headers = {"layer": "ablation.col_layer", "head": "ablation.col_head", "effect": f"ablation.col_{sweep.measure}"}
    st.caption(
        t("estimate_check.ranked_sweep_lm" if sweep.measure == "kl_mean" else "estimate_check.ranked_sweep_encoder")
    )
    ranked_heads(list(top.itertuples(index=False)), "ablation_ranked", list(top.columns), headers)  # a click opens it


def sweep_section(source: AttentionSource, settings: Settings, mode: str, view_key: tuple = ()) -> None:
    """Every head ablated alone: the time it will take here, then a Run button; while it runs, a progress bar and
    a Stop button, a pass at a time (:class:`attnviz.app.jobs.PieceJob`): a Stop keeps what was done, the partial
    map, and Continue. ``view_key``: what else chose the heads and the text measured (an encoder-decoder's kind and
    target)."""
    st.subheader(t("ablation.sweep"))
    sweep_tokens = token_limit(settings.max_tokens, SWEEP_TOKENS)
    key = (settings.spec, settings.text, sweep_tokens, mode, *view_key)
    job = PieceJob("ablation_sweep", key, extra=("losses",))
    found, sweep = result_cache().lookup(("ablation_sweep", key))
    if found:
        limit = limit_text("ablation.sweep_limit", sweep.n_tokens, settings.max_tokens, SWEEP_TOKENS)
        st.caption(t("ablation.sweep_done", n=sweep.n_heads, tokens=sweep.n_tokens, limit=limit))
        job.time_taken()
        show_sweep(sweep)
        return
    need = ablation.sweep_need(source, sweep_tokens)
    priced_as = ("ablation_sweep_baseline", key)
    baseline = cached(
        "ablation_sweep_baseline",
        key,
        probed(
            priced_as, lambda: ablation.sweep_baseline(source, settings.text, sweep_tokens, mode), device_of(source)
        ),
        t("ablation.sweep_timing"),
        need,
    )
    values = {**baseline.first, **job.values}
    limit = limit_text("ablation.sweep_limit", baseline.n_tokens, settings.max_tokens, SWEEP_TOKENS)
    if len(values) == len(baseline.heads):  # timing the first pass ran every head: nothing left to ask for
        result_cache().get_or_compute(("ablation_sweep", key), lambda: ablation.sweep_result(baseline, values, {}))
        st.rerun()  # drawn as done, with the estimate above beside it
    price = job.quote(priced_as, baseline.seconds(values), device_of(source))
    st.caption(
        t(
            "ablation.sweep_caption",
            n=len(baseline.heads),
            tokens=baseline.n_tokens,
            limit=limit,
            passes=len(baseline.pieces()),
            rows=baseline.rows,
            time=about(price.seconds),
            pass_time=t("ablation.pass_seconds", n=baseline.pass_seconds)
            if baseline.pass_seconds < 10
            else duration_text(baseline.pass_seconds),
        )
    )
    if not job.running:
        n, timed = len(baseline.heads), len(baseline.first)
        job.offer(
            t("prices.run_sweep", n=n, timed=timed, left=n - timed, time=about(price.seconds)),
            t("prices.continue", left=n - len(values), time=about(price.seconds)),
            stopped=lambda: show_sweep(ablation.sweep_result(baseline, values, job.kept("losses"))),
            share=baseline.timed_share,
            primary=True,
        )
        return
    job.run(
        t("ablation.sweeping"),
        t("ablation.sweep_stop"),
        baseline.need(source, price.seconds),
        lambda progress, log: ablation.run_pieces(
            source, settings.text, baseline, job.values, progress, job.kept("losses"), log
        ),
    )
    done = ablation.sweep_result(baseline, job.values, job.kept("losses"))
    result_cache().get_or_compute(("ablation_sweep", key), lambda: done)
    job.finish(baseline.timed_share)  # the estimate above was drawn before the sweep ended: drawn again beside it


def estimate_section(source: AttentionSource, settings: Settings, mode: str, view_key: tuple = ()) -> None:
    """Every head's effect estimated in one forward and one backward (attribution patching), beside the exact sweep
    when it ran (Spearman's ρ and the top-10 overlap), the heads known to mislead it named, and its top heads
    confirmed exactly with one click."""
    st.subheader(t("heads_matter.estimate"))
    if Capability.EDIT_HEADS not in source.capabilities:
        st.caption(t("heads_matter.estimate_unsupported", name=markdown_text(source.name)))
        return
    if mode not in attribution.ESTIMATE_MODES:
        st.caption(t("heads_matter.estimate_mode", mode=t(f"ablation.mode_{mode}")))
        return
    n_tokens = token_limit(settings.max_tokens, ESTIMATE_TOKENS)
    lm = Capability.GENERATE in source.capabilities
    graddrop = lm and st.checkbox(
        t("estimate_check.graddrop_option"), key="ablation_graddrop", help=t("estimate_check.graddrop_help")
    )
    key = (settings.spec, settings.text, n_tokens, mode, *view_key)
    need = attribution.estimate_need(source, n_tokens, graddrop)
    estimate = cached_job(
        "ablation_estimate",
        (*key, graddrop),
        lambda progress: attribution.estimate_ablation(source, settings.text, n_tokens, mode, graddrop),
        t("heads_matter.estimating"),
        need,
    )
    measure = t("heads_matter.measure_loss") if lm else t("heads_matter.measure_hidden")
    st.caption(
        t(
            "heads_matter.estimate_caption_lm" if lm else "heads_matter.estimate_caption_encoder",
            tokens=len(source.encode(settings.text, n_tokens).tokens),
            passes=t(f"heads_matter.passes_{estimate.kind}", probes=attribution.PROBES),
            seconds=estimate.seconds,
        )
    )
    if estimate.graddrop is not None:
        st.caption(t("estimate_check.graddrop_ran", n=source.n_layer, seconds=estimate.seconds))
    plotly(
        make_head_effect_figure(
            estimate.values, title=t("heads_matter.estimate_title", measure=measure), measure=measure, signed=lm
        ),
        key="ablation_estimate_map",
    )
    estimate_flags(estimate)
    sweep_tokens = token_limit(settings.max_tokens, SWEEP_TOKENS)
    found, sweep = result_cache().lookup(
        ("ablation_sweep", (settings.spec, settings.text, sweep_tokens, mode, *view_key))
    )
    top = patching.confirm(estimate)
    confirmed_key = ("ablation_confirmed", key)
    has_confirmed, confirmed = result_cache().lookup(confirmed_key)
    exact = sweep if found else confirmed if has_confirmed else None
    exact_values = None
    if exact is not None:
        exact_values = exact.loss_change if lm and exact.loss_change else exact.values
    scores = estimate.values if estimate.graddrop is None else estimate.graddrop
    if found and sweep_tokens == n_tokens:
        agreement_note(rank_agreement(scores, exact_values))
        _head_check(estimate, exact, lm)
    same = lm and exact is not None and bool(exact.loss_change) and (not found or sweep_tokens == n_tokens)
    k = None if found else patching.TOP_K  # after the whole sweep every head, sortable; before it the top ones
    ranked = by_size(exact_values, k) if found and same else estimate.ranked(k)
    estimate_table(
        ranked,
        estimate.values,
        exact_values,
        "ablation_estimate_ranked",
        measure=measure,
        same_measure=same,
        graddrop=estimate.graddrop,
        caption=t(
            "estimate_check.ranked_estimate" if lm else "estimate_check.ranked_estimate_encoder", measure=measure
        ),
    )
    if exact is None:
        if st.button(t("heads_matter.confirm", k=len(top)), key="ablation_confirm"):
            with (
                st.spinner(t("heads_matter.confirming", heads=heads_text(top))),
                admitted(ablation.sweep_need(source, n_tokens), request_id("ablation_top", key)),
            ):
                result_cache().get_or_compute(
                    confirmed_key, lambda: ablation.confirm_heads(source, settings.text, n_tokens, mode, top)
                )
            st.rerun()
    elif not found:
        agreement = rank_agreement(
            [
                [estimate.values[layer][head] if (layer, head) in top else math.nan for head in range(len(row))]
                for layer, row in enumerate(estimate.values)
            ],
            exact_values,
        )
        st.caption(t("heads_matter.confirmed", k=len(top), rho=agreement.spearman))
        _head_check(estimate, exact, lm)


def _head_check(estimate, exact: AblationSweep, lm: bool) -> None:
    """The estimate against the exact effects head by head, where both measure the same thing (an LM's loss
    change); otherwise why only their rankings are compared."""
    if lm and exact.loss_change:
        check = head_check(
            estimate.values,
            exact.loss_change,
            estimate.saturated,
            estimate.cancelling,
            graddrop=estimate.graddrop_flagged,
        )
        head_check_note(check, flag_report(estimate.values, exact.loss_change, estimate.flags()))
        return
    measures = (
        (t("heads_matter.measure_loss"), t("estimate_agree.exact_kl"))
        if lm
        else (t("estimate_agree.estimate_hidden"), t("estimate_agree.exact_hidden"))
    )
    st.caption(t("estimate_agree.measures_differ", estimate=measures[0], exact=measures[1]))

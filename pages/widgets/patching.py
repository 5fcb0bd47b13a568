"""The Patching page's widgets: two texts patched head by head (estimated, then exact, stoppable), and each head's
direct contribution to a token's logit."""

from __future__ import annotations

import math

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
from attnviz.app.progress import probed
from attnviz.app.queue_view import admitted, request_id
from attnviz.app.state import Settings, valid_choice
from attnviz.app.widgets import layer_head_picker, plotly, show_error, show_info
from attnviz.core.device_speed import device_of
from attnviz.core.token_display import markdown_text, visible_text
from attnviz.figures.base import hover_text
from attnviz.figures.heads_matter import make_head_effect_figure, make_positions_figure
from attnviz.figures.position_patching import make_position_patch_figure
from attnviz.i18n.translate import t
from attnviz.labs.heads_matter import attribution, corruption, patching
from attnviz.labs.heads_matter.agreement import flag_report, head_check
from attnviz.labs.heads_matter.common import token_limit
from attnviz.labs.heads_matter.direct_logits import direct_logit_attribution, direct_logits_need
from attnviz.models.readings import Verdict
from attnviz.models.source import AttentionSource, Capability
from attnviz.settings import PATCH_TOKENS

RANKED_K = 10


def _metric(
    source: AttentionSource, settings: Settings, n_tokens: int, clean: str, corrupt: str, swapped: tuple[str, ...]
) -> patching.Metric:
    """The metric picker: an LM's logit difference (two tokens, by default each text's most likely next token, or
    another B where they agree: :func:`patching.default_tokens`), loss or KL; an encoder's hidden-state distance."""
    if Capability.GENERATE not in source.capabilities:
        st.caption(t("patching.encoder_metric"))
        return patching.Metric("hidden")
    valid_choice("patch_metric", patching.LM_METRICS, "logit-diff")
    kind = st.radio(
        t("patching.metric"),
        patching.LM_METRICS,
        key="patch_metric",
        horizontal=True,
        format_func=lambda name: t(f"patching.metric_{name.replace('-', '_')}"),
    )
    if kind != "logit-diff":
        return patching.Metric(kind)
    defaults = cached(
        "patch_defaults",
        (settings.spec, clean, corrupt, n_tokens, swapped),
        lambda: patching.default_tokens(source, clean, corrupt, n_tokens, swapped),
        t("patching.reading_defaults"),
        patching.patch_need(source, n_tokens),  # its key's shape is no capture's
    )
    if defaults is not None:  # each text's own answer, until the reader types other tokens
        proposed = (defaults.a, defaults.b)
        shown = (st.session_state.get("patch_token_a"), st.session_state.get("patch_token_b"))
        if "patch_token_a" not in st.session_state or shown == st.session_state.get("patch_tokens_proposed"):
            st.session_state.patch_token_a, st.session_state.patch_token_b = proposed
        st.session_state.patch_tokens_proposed = proposed
    left, right = st.columns(2)
    token_a = left.text_input(t("patching.token_a"), key="patch_token_a")
    token_b = right.text_input(t("patching.token_b"), key="patch_token_b")
    st.caption(t("patching.tokens_caption"))
    if defaults is not None and defaults.note is not None and (token_a, token_b) == (defaults.a, defaults.b):
        show_info(defaults.note)  # the two texts agree on their answer: why B is another token
    return patching.Metric("logit-diff", (token_a, token_b))


def patch_section(source: AttentionSource, settings: Settings) -> None:
    """The clean text (the sidebar's) and a corrupted one, proposed from it until the reader types one
    (:func:`corruption.propose`: a swap, or the built-in example pair, clean text and all); the metric on both; every
    head's estimated restored fraction at once, then exact patching of the top heads (one click) or of every head
    (stoppable), and one head position by position."""
    n_tokens = token_limit(settings.max_tokens, PATCH_TOKENS)
    proposal = cached(
        "patch_proposal",
        (settings.spec, settings.text, n_tokens),
        lambda: corruption.propose(source, settings.text, n_tokens),
        t("patch_proposal.proposing"),
        corruption.propose_need(settings.text),
    )
    if st.session_state.get("patch_corrupt", proposal.corrupt) == st.session_state.get(
        "patch_corrupt_from", proposal.corrupt
    ):
        st.session_state.patch_corrupt = proposal.corrupt  # the proposal until the reader edits it: theirs is kept
    st.session_state.patch_corrupt_from = proposal.corrupt
    corrupt = st.text_area(t("patching.corrupt"), key="patch_corrupt", height=80)
    st.caption(t("patching.corrupt_caption", tokens=n_tokens))
    proposed = corrupt == proposal.corrupt
    clean = proposal.clean if proposed else settings.text  # the built-in example's clean text while it is shown
    if proposed:
        show_info(proposal.message)
    metric = _metric(source, settings, n_tokens, clean, corrupt, proposal.swapped if proposed else ())
    if metric.kind == "logit-diff" and not all(metric.tokens):
        st.info(t("patching.give_tokens"))
        return
    key = (settings.spec, clean, corrupt, n_tokens, metric)
    need = attribution.pair_estimate_need(source, n_tokens)

    def job(progress) -> patching.EstimatedPair:
        pair = patching.run_pair(source, clean, corrupt, n_tokens, metric)
        if pair.gap == 0:
            return patching.EstimatedPair(pair, None)
        return patching.EstimatedPair(pair, attribution.estimate_patching(source, pair, clean, corrupt))

    found_pair = cached_job("patch_estimate", key, job, t("patching.estimating"), need)
    pair, estimate = found_pair.pair, found_pair.estimate
    cols = st.columns(3)
    cols[0].metric(t("patching.clean_value"), f"{pair.clean:.4f}")
    cols[1].metric(t("patching.corrupt_value"), f"{pair.corrupt:.4f}")
    cols[2].metric(t("patching.gap"), f"{pair.gap:+.4f}")
    st.caption(t("patching.metric_caption", metric=markdown_text(pair.metric.label)))
    if estimate is None:
        st.info(t("patching.no_gap"))
        return
    job = PieceJob("patch", key)  # every head patched exactly: {head: M}
    found, exact = result_cache().lookup(("patch_exact", key))
    values = dict(exact) if found else dict(job.values)
    confirmed_found, confirmed = result_cache().lookup(("patch_confirmed", key))
    if confirmed_found:
        values = {**confirmed, **values}
    result = patching.patch_result(pair, values, 0.0, estimate)
    measure = t("patching.fraction")
    passes = t(f"heads_matter.passes_{estimate.kind}", probes=attribution.PROBES)
    st.caption(t("patching.estimate_caption", passes=passes, seconds=estimate.seconds))
    shown = [abs(v) for row in (*estimate.values, *result.effects) for v in row if v is not None and math.isfinite(v)]
    limit = max(shown, default=1.0)  # one scale for both maps: the same head is the same colour in each
    left, right = st.columns(2)
    with left:
        plotly(
            make_head_effect_figure(estimate.values, title=t("patching.estimate_title"), measure=measure, limit=limit),
            key="patch_estimate_map",
        )
    with right:
        if values:
            plotly(
                make_head_effect_figure(result.effects, title=t("patching.exact_title"), measure=measure, limit=limit),
                key="patch_exact_map",
            )
        else:
            st.info(t("patching.exact_not_run"))
    estimate_flags(estimate)
    if len(values) >= 2:
        agreement_note(result.agreement())
    if values:  # the same measure on both sides (the fraction restored): compared head by head too
        check = head_check(
            estimate.values, result.effects, estimate.saturated, estimate.cancelling, graddrop=estimate.graddrop_flagged
        )
        head_check_note(check, flag_report(estimate.values, result.effects, estimate.flags()))
    ranked = result.ranked() if len(values) == pair.n_layer * pair.n_head else estimate.ranked(RANKED_K)  # all once run
    estimate_table(ranked, estimate.values, result.effects, "patch_ranked", measure=measure)
    top = patching.confirm(estimate)
    if not confirmed_found and not found and st.button(t("heads_matter.confirm", k=len(top)), key="patch_confirm"):
        need = patching.patch_need(source, pair.n_tokens)
        with (
            st.spinner(t("heads_matter.confirming", heads=heads_text(top))),
            admitted(need, request_id("patch_top", key)),
        ):
            result_cache().get_or_compute(("patch_confirmed", key), lambda: patching.patch_heads(source, pair, top))
        st.rerun()
    if not found:
        _exact_section(source, pair, job)
    else:
        job.time_taken()  # this session ran it: the time beside the price
    _positions_section(source, pair, key, ranked[0][:2] if ranked else (0, 0))  # priced by the plan timed above


def _positions_section(source: AttentionSource, pair: patching.RunPair, key: tuple, top: tuple[int, int]) -> None:
    """One head (the top-ranked one by default) patched at one position at a time, priced and stoppable like
    every head's patching: a bar a token, the fraction each position restores."""
    st.subheader(t("patch_positions.title"))
    st.caption(t("patch_positions.caption", n=pair.n_tokens))
    if "patch_positions_layer" not in st.session_state:
        st.session_state.patch_positions_layer, st.session_state.patch_positions_head = top
    layer, head = layer_head_picker(pair.n_layer, pair.n_head, "patch_positions", with_mean=False)
    head_key = (*key, (int(layer), int(head)))
    found, values = result_cache().lookup(("patch_positions", head_key))
    if found:
        result = patching.positions_result(pair, (int(layer), int(head)), values)
        plotly(
            make_position_patch_figure(
                result.fractions,
                pair.clean_tokens,
                title=t("patch_positions.figure_title", layer=layer, head=head),
                measure=t("patching.fraction"),
            ),
            key="patch_positions_map",
        )
        return
    job = PieceJob("patch_positions", head_key)  # {position: M}
    done = dict(job.values)
    if not job.running:
        need = patching.patch_need(source, pair.n_tokens)
        priced_as = ("patch_plan", key)  # every head's timing passes, as the exact section times them
        plan_job = probed(priced_as, lambda: patching.plan_patching(source, pair), device_of(source))
        plan = cached("patch_plan", key, plan_job, t("patching.timing"), need)
        seconds = plan.positions_seconds((layer, head), pair.n_tokens - len(done))
        price = about(job.quote(priced_as, seconds, device_of(source)).seconds)
        job.offer(
            t("patch_positions.run", layer=layer, head=head, n=pair.n_tokens, time=price),
            t("patch_positions.continue", left=pair.n_tokens - len(done), time=price),
            stopped=lambda: st.warning(t("patch_positions.stopped", done=len(done), total=pair.n_tokens)),
            note=False,
        )
        return
    job.run(
        t("patch_positions.running", layer=layer, head=head),
        t("patching.stop"),
        patching.patch_need(source, pair.n_tokens),
        lambda progress, log: patching.patch_positions(source, pair, (int(layer), int(head)), progress, job.values),
        request="patch_pos",
    )
    result_cache().get_or_compute(("patch_positions", head_key), lambda: dict(job.values))
    job.finish(timed=False)


def _exact_section(source: AttentionSource, pair: patching.RunPair, job: PieceJob) -> None:
    """Every head patched exactly, a pass at a time; a Stop keeps the passes done, Continue runs the rest."""
    need = patching.patch_need(source, pair.n_tokens)
    priced_as = ("patch_plan", job.key)
    plan_job = probed(priced_as, lambda: patching.plan_patching(source, pair), device_of(source))
    plan = cached("patch_plan", job.key, plan_job, t("patching.timing"), need)
    done = {**plan.done, **job.values}
    total = len(plan.heads)
    price = job.quote(priced_as, plan.seconds(done), device_of(source))  # what is left
    if not job.running:
        timed = len(plan.done)
        job.offer(
            t("prices.run_patch", n=total, timed=timed, left=total - timed, time=about(price.seconds)),
            t("prices.continue", left=total - len(done), time=about(price.seconds)),
            stopped=lambda: st.warning(t("patching.stopped", done=len(done), total=total)),
            share=plan.timed_share,
        )
        return

    def work(progress, log) -> None:
        job.values.update(plan.done)
        patching.patch_heads(source, pair, plan.heads, progress, job.values, log, plan.piece_seconds)

    job.run(
        t("patching.patching"),
        t("patching.stop"),
        patching.patch_need(source, pair.n_tokens, price.seconds),
        work,
    )
    result_cache().get_or_compute(("patch_exact", job.key), lambda: dict(job.values))
    job.finish(plan.timed_share)


def direct_logit_section(source: AttentionSource, settings: Settings) -> None:
    """Each head's direct contribution to a token's logit at a position: the layer x head map, the heads in rank
    order, the sum checked against the model's logit, and one head's contribution at every position."""
    if Capability.GENERATE not in source.capabilities:
        st.info(t("patching.no_logits", name=markdown_text(source.name)))
        return
    n_tokens = token_limit(settings.max_tokens, PATCH_TOKENS)
    n = len(source.encode(settings.text, n_tokens).tokens)
    if not n:
        st.info(t("patching.no_text"))
        return
    valid_choice("dla_position", range(n), n - 1)
    if st.session_state.get("dla_for") != (settings.text, n_tokens):  # a new text opens on its last position
        st.session_state.dla_position, st.session_state.dla_for = n - 1, (settings.text, n_tokens)
    left, right = st.columns(2)
    position = left.number_input(t("patching.position"), 0, n - 1, key="dla_position")
    token = right.text_input(t("patching.token"), key="dla_token", placeholder=t("patching.token_placeholder"))
    token = token or None
    try:
        found = cached(
            "direct_logits",
            (settings.spec, settings.text, n_tokens, token, int(position)),
            lambda: direct_logit_attribution(source, settings.text, n_tokens, token, int(position)),
            t("patching.attributing"),
            direct_logits_need(source, n_tokens),
        )
    except ValueError as err:
        show_error(err)
        return
    at = int(position)
    check = t(
        "patching.sum_check",
        heads=float(found.per_head[at].sum()),
        rest=float(found.rest[at]),
        logit=float(found.logits[at]),
        error=found.check_error,
        norm=t(f"patching.norm_{found.norm}"),
    )
    st.caption(check)
    if not found.checked:
        st.warning(t("patching.check_failed", error=found.check_error))
    joins = sorted({float(f"{c:.4g}") for c in found.join_scales if c != 1.0})  # as shown: 4 digits
    if joins:
        scales = f"{joins[0]:.4g}" if len(joins) == 1 else f"{joins[0]:.4g}–{joins[-1]:.4g}"
        st.info(t("patching.scaled_joins", scales=scales))
    if found.logit_scale != 1.0:
        st.info(t("patching.scaled_logits", scale=found.logit_scale))
    parallel = [layer for layer, join in enumerate(found.joins) if join.verdict is Verdict.NOT_APPLICABLE]
    if parallel:
        st.info(t("patching.parallel_joins", n=len(parallel)))
    token_shown = hover_text(visible_text(found.token))  # the reader's token: data, not Plotly markup
    measure = t("patching.logit_measure", token=token_shown)
    plotly(
        make_head_effect_figure(
            found.at(at).tolist(), title=t("patching.logits_title", token=token_shown, position=at), measure=measure
        ),
        key="dla_map",
    )
    ranked = found.ranked(at, RANKED_K)
    rows = [(layer, head, float(f"{v:.4g}")) for layer, head, v in ranked]
    ranked_heads(
        rows,
        "dla_ranked",
        ["layer", "head", "logit"],
        {"layer": "ablation.col_layer", "head": "ablation.col_head", "logit": "patching.col_logit"},
    )
    if ranked:
        layer, head, _ = ranked[0]
        plotly(
            make_positions_figure(
                found.head_positions((layer, head)).tolist(),
                found.tokens,
                title=t("patching.positions_title", layer=layer, head=head, token=token_shown),
                measure=measure,
            ),
            key="dla_positions",
        )

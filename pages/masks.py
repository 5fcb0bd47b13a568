"""Mask lab: build any mask, see what it does to real attention, a gallery of mask bugs, and a mask doctor."""

import streamlit as st

from attnviz import settings as limits
from attnviz.app.loading import cached, cached_job, require_qk, require_source, require_text, unknown_warning
from attnviz.app.navigation import frame_settings
from attnviz.app.search import new_focus, token_search
from attnviz.app.state import valid_choice
from attnviz.app.widgets import layer_head_picker, plotly, show_error, table
from attnviz.core.token_display import markdown_text, plain_text
from attnviz.errors import ModelUnavailableError
from attnviz.figures.heads import make_row_figure
from attnviz.figures.masks import make_difference_figure, make_leak_figure, make_mask_figure, make_masked_weights_figure
from attnviz.i18n.message import PluralS, msg
from attnviz.i18n.translate import t, tr
from attnviz.labs.masks.builder import decode_note
from attnviz.labs.masks.doctor import diagnose, parse_expect
from attnviz.labs.masks.effects import (
    blocked_by,
    counted_rows,
    describe_bug_effect,
    head_effect,
    leak_test,
    mask_digest,
    meant_keep,
)
from attnviz.labs.masks.gallery import TABLE_HEADERS as GALLERY_HEADERS
from attnviz.labs.masks.gallery import gallery, gallery_table
from attnviz.labs.masks.verdict import verdict
from attnviz.models.record import short_text
from pages.widgets.masks import lab_mask_input

st.title(t("masks.title"))
st.markdown(t("masks.intro"))
settings = frame_settings()
source = require_source(settings)
require_qk(source)  # both recompute the weights from the model's q and k
require_text(settings)
n_tokens = min(settings.max_tokens, limits.MASK_TOKENS)
try:
    record = cached_job(
        "record",
        settings.key(n_tokens),
        lambda progress: source.run(settings.text, n_tokens, progress=progress),
        t("masks.capturing"),
    )
except (ModelUnavailableError, ValueError) as err:
    show_error(err)
    st.stop()
T, labels = record.q_len, record.labels()
unknown_warning(record.tokens, record.model_name)
if T < 2:
    st.info(t("masks.too_short"))
    st.stop()
if record.truncated:
    st.caption(t("masks.truncated", T=T))


st.subheader(t("masks.build"))
lab = lab_mask_input(labels, source.description.causal)

own = "causal" if source.description.causal else None
# the labels never change, or the radio would be drawn anew (and empty) when the model or the mask does
choices = ("model", "built", "none", "custom")
cols = st.columns([2, 1])
meant = cols[0].radio(  # by default what the mask was built as (a custom mask says nothing: the model's own)
    t("masks.meant"), choices, index=1, format_func=lambda choice: t(f"masks.meant_{choice}"), key="mask_meant"
)
expect_text = {"model": own, "none": None, "built": own if lab.custom else lab.expect}.get(meant)
if meant == "custom":
    expect_text = cols[1].text_input(t("masks.expect_text"), "causal", key="mask_expect_text")
else:
    cols[1].caption(t("masks.expected", expect=expect_text or t("masks.expected_nothing")))
try:
    expect = parse_expect(expect_text) if expect_text else None
except ValueError as err:
    show_error(msg("masks.invalid_expectation", error=err))
    st.stop()
lengths = lab.lengths if expect is not None and "padding" in expect.kind else None
try:  # an expectation this mask cannot be checked against (padding, with no pads built) is said, not raised
    diagnosis = diagnose(
        lab.raw, convention=lab.convention, expect=expect, lengths=lengths, side=lab.side, q_len=lab.q_len
    )
except ValueError as err:
    show_error(msg("masks.invalid_expectation", error=err))
    st.stop()
if lab.q_len is not None:
    st.caption(
        t("mask_decode_lab.decode_caption", q_len=lab.q_len, T=T, offset=T - lab.q_len, s_offset=PluralS(T - lab.q_len))
    )

meant_mask = meant_keep(lab.keep, expect, lengths=lengths, side=lab.side)  # (T, T): what it is meant to keep
rows = counted_rows(T, lengths, lab.side)  # padding rows are don't-care, for the doctor and the leak test alike

st.subheader(t("masks.one_head"))
layer, head = layer_head_picker(record.n_layer, record.n_head, key="mask", with_mean=False)
effect = head_effect(record, layer, head, lab.acting, meant_mask)
cols = st.columns(3)
cols[0].metric(t("masks.leaked"), f"{effect.leaked:.3g}", help=t("masks.leaked_help"))
cols[1].metric(t("masks.nan_rows"), len(effect.nan_rows), help=t("masks.nan_rows_help"))
cols[2].metric(t("masks.changed"), f"{effect.changed:.3g}")
problems = {p.kind: lab.full_cells(p.cells) for p in diagnosis.problems if p.cells.shape == lab.raw.shape}
left, right = st.columns(2)
with left:
    plotly(make_mask_figure(lab.keep, labels, problems=problems, title=t("masks.fig_mask")), "mask_fig")
    plotly(make_masked_weights_figure(effect.weights, labels, lab.keep, title=t("masks.fig_with")), "mask_with")
with right:
    plotly(
        make_masked_weights_figure(effect.reference, labels, record.mask(layer), title=t("masks.fig_without")),
        "mask_without",
    )
    plotly(make_difference_figure(effect.difference, labels, title=t("masks.fig_difference")), "mask_diff")
st.caption(t("masks.head_caption", layer=layer, head=head, T=T, reference=tr(record.keys(layer).describe())))
tokens = cached(  # the whole text, as the other pages read it: the search finds what lies beyond T too
    "tokens", settings.key(), lambda: source.encode(settings.text, settings.max_tokens).tokens, t("search.reading")
)
token_search(tokens, key="mask_search")
picked = new_focus("mask")  # once per pick: a pick on another page, or for another text, says nothing here
if picked is not None and picked < len(tokens) and not (picked < T and record.tokens[picked] == tokens[picked]):
    st.info(t("search.beyond_mask_lab", index=picked, n=T))
elif picked is not None:
    st.session_state["mask_row"] = picked
valid_choice("mask_row", range(T), T - 1)  # the last row: in a decoder it sees every key
row = int(st.number_input(t("search.mask_row"), 0, T - 1, key="mask_row"))
plotly(
    make_row_figure(
        effect.weights[row],
        labels,
        visible=lab.keep[row],
        title=t("search.mask_row_with", row=row, token=plain_text(short_text(record.tokens[row].text))),
    ),
    "mask_row_fig",
)

st.subheader(t("masks.doctor"))
leak = cached_job(
    "mask_leak",
    (
        *settings.key(n_tokens),
        mask_digest(lab.acting),
        mask_digest(meant_mask),
        "" if rows is None else mask_digest(rows),
    ),
    lambda progress: leak_test(source, settings.text, n_tokens, lab.acting, meant_mask, rows, progress=progress),
    t("masks.leak_spinner"),
)
found = verdict(diagnosis, leak, meant_mask, rows)  # one verdict: the doctor's reading and the leak test's run
convention_name = t(f"masks.convention_{diagnosis.convention}")  # keep, block or additive, in words
shape, n_problems = list(diagnosis.shape), len(diagnosis.problems)
if diagnosis.ok:
    headline = t("masks.no_problem", convention=convention_name, shape=shape)
else:
    headline = t("masks.problems", n=n_problems, s=PluralS(n_problems), convention=convention_name, shape=shape)
verdict_box = st.success if diagnosis.ok and not found.leaks else st.error  # a leak either finds is a leak
verdict_box(f"{headline} {tr(found.describe())}")
for problem in diagnosis.problems:
    st.markdown(f"- **{problem.kind}** ({problem.count:,}): {tr(problem.message, escape=markdown_text)}")
for note in diagnosis.notes:
    st.caption(tr(note, escape=markdown_text))
if (past_end := decode_note(lab)) is not None:
    st.info(tr(past_end))
step = range(T - lab.q_len, T) if lab.q_len is not None else ()  # a decode step's queries: the text's last rows
st.markdown(t("masks.leak_test", result=leak.describe(step)))
plotly(make_leak_figure(leak.change, labels, leak.tolerance, leak.cuts), "mask_leak_fig")

st.subheader(t("masks.gallery"))
bugs = gallery(T, source.description.causal)
table(
    gallery_table(bugs, record, layer, head),
    key="mask_gallery_table",
    headers=GALLERY_HEADERS,
    hide_index=True,
    width="stretch",
)
st.caption(t("masks.gallery_caption", layer=layer, head=head))
valid_choice("mask_bug", range(len(bugs)), 0)
pick = st.selectbox(t("masks.look_at_one"), range(len(bugs)), format_func=lambda i: tr(bugs[i].title), key="mask_bug")
bug = bugs[pick]
st.markdown(t("masks.bug_fix", what=bug.what, fix=bug.fix))
fixed = head_effect(record, layer, head, bug.correct, bug.intended)
broken = head_effect(record, layer, head, bug.buggy, bug.intended)
left, right = st.columns(2)
with left:
    plotly(
        make_masked_weights_figure(fixed.weights, labels, bug.intended, title=t("masks.fig_correct")),
        "mask_bug_correct",
    )
with right:
    plotly(
        make_masked_weights_figure(broken.weights, labels, ~blocked_by(bug.buggy), title=t("masks.fig_bug")),
        "mask_bug_fig",
    )
bug_rows = counted_rows(T, bug.lengths, bug.side)
bug_leak = cached_job(
    "mask_leak",
    (*settings.key(n_tokens), mask_digest(bug.buggy), mask_digest(bug.intended), str(bug.lengths), bug.side),
    lambda progress: leak_test(source, settings.text, n_tokens, bug.buggy, bug.intended, bug_rows, progress=progress),
    t("masks.bug_leak_spinner"),
)
st.markdown(tr(describe_bug_effect(broken, bug_leak)))

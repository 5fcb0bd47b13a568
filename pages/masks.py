"""Mask lab: build any mask, see what it does to real attention, a gallery of mask bugs, and a mask doctor."""

import streamlit as st

from attnviz import settings as limits
from attnviz import ui
from attnviz.i18n import t
from attnviz.mask_doctor import diagnose, parse_expect
from attnviz.mask_effects import blocked_by, describe_bug_effect, head_effect, leak_test, mask_digest
from attnviz.mask_figures import make_difference_figure, make_leak_figure, make_mask_figure, make_masked_weights_figure
from attnviz.mask_gallery import gallery, gallery_table
from attnviz.source import ModelUnavailableError
from attnviz.token_display import markdown_text

st.title(t("masks.title"))
st.markdown(t("masks.intro"))
settings = ui.frame_settings()
source = ui.require_source(settings)
ui.require_text(settings)
n_tokens = min(settings.max_tokens, limits.MASK_TOKENS)
try:
    record = ui.cached(
        "record", settings.key(n_tokens), lambda: source.run(settings.text, n_tokens), t("masks.capturing")
    )
except (ModelUnavailableError, ValueError) as err:
    st.error(markdown_text(str(err)))
    st.stop()
T, labels = record.q_len, record.labels()
if T < 2:
    st.info(t("masks.too_short"))
    st.stop()
if record.truncated:
    st.caption(t("masks.truncated", T=T))


st.subheader(t("masks.build"))
lab = ui.lab_mask_input(labels, source.causal)

own = "causal" if source.causal else None
# the labels never change, or the radio would be drawn anew (and empty) when the model or the mask does
choices = ("model", "built", "none", "custom")
cols = st.columns([2, 1])
meant = cols[0].radio(
    t("masks.meant"), choices, format_func=lambda choice: t(f"masks.meant_{choice}"), key="mask_meant"
)
expect_text = {"model": own, "none": None, "built": lab.expect}.get(meant)
if meant == "custom":
    expect_text = cols[1].text_input(t("masks.expect_text"), "causal", key="mask_expect_text")
else:
    cols[1].caption(t("masks.expected", expect=expect_text or t("masks.expected_nothing")))
try:
    expect = parse_expect(expect_text) if expect_text else None
except ValueError as err:
    st.error(t("masks.invalid_expectation", error=err))
    st.stop()
lengths = lab.lengths if expect is not None and "padding" in expect.kind else None
diagnosis = diagnose(lab.raw, convention=lab.convention, expect=expect, lengths=lengths, side=lab.side)

st.subheader(t("masks.one_head"))
layer, head = ui.layer_head_picker(record.n_layer, record.n_head, key="mask", with_mean=False)
effect = head_effect(record, layer, head, lab.acting, lab.keep)
cols = st.columns(3)
cols[0].metric(t("masks.leaked"), f"{effect.leaked:.3g}", help=t("masks.leaked_help"))
cols[1].metric(t("masks.nan_rows"), len(effect.nan_rows), help=t("masks.nan_rows_help"))
cols[2].metric(t("masks.changed"), f"{effect.changed:.3g}")
problems = {p.kind: p.cells for p in diagnosis.problems if p.cells is not None and p.cells.shape == lab.keep.shape}
left, right = st.columns(2)
with left:
    ui.plotly(make_mask_figure(lab.keep, labels, problems=problems, title=t("masks.fig_mask")), "mask_fig")
    ui.plotly(make_masked_weights_figure(effect.weights, labels, lab.keep, title=t("masks.fig_with")), "mask_with")
with right:
    ui.plotly(
        make_masked_weights_figure(effect.reference, labels, record.mask(layer), title=t("masks.fig_without")),
        "mask_without",
    )
    ui.plotly(make_difference_figure(effect.difference, labels, title=t("masks.fig_difference")), "mask_diff")
st.caption(t("masks.head_caption", layer=layer, head=head, T=T, reference=record.keys(layer).describe()))

st.subheader(t("masks.doctor"))
if diagnosis.ok:
    st.success(t("masks.no_problem", convention=diagnosis.convention, shape=list(diagnosis.shape)))
else:
    st.error(
        t("masks.problems", n=len(diagnosis.problems), convention=diagnosis.convention, shape=list(diagnosis.shape))
    )
    for problem in diagnosis.problems:
        st.markdown(f"- **{problem.kind}** ({problem.count:,}): {markdown_text(problem.message)}")
for note in diagnosis.notes:
    st.caption(note)

leak = ui.cached(
    "mask_leak",
    (*settings.key(n_tokens), mask_digest(lab.acting)),
    lambda: leak_test(source, settings.text, n_tokens, lab.acting),
    t("masks.leak_spinner"),
)
st.markdown(t("masks.leak_test", result=leak.describe()))
ui.plotly(make_leak_figure(leak.change, labels, leak.tolerance, leak.cuts), "mask_leak_fig")

st.subheader(t("masks.gallery"))
bugs = gallery(T, source.causal)
ui.table(gallery_table(bugs, record, layer, head), key="mask_gallery_table", hide_index=True, width="stretch")
st.caption(t("masks.gallery_caption", layer=layer, head=head))
ui.valid_choice("mask_bug", range(len(bugs)), 0)
pick = st.selectbox(t("masks.look_at_one"), range(len(bugs)), format_func=lambda i: bugs[i].title, key="mask_bug")
bug = bugs[pick]
st.markdown(t("masks.bug_fix", what=bug.what, fix=bug.fix))
fixed = head_effect(record, layer, head, bug.correct, bug.intended)
broken = head_effect(record, layer, head, bug.buggy, bug.intended)
left, right = st.columns(2)
with left:
    ui.plotly(
        make_masked_weights_figure(fixed.weights, labels, bug.intended, title=t("masks.fig_correct")),
        "mask_bug_correct",
    )
with right:
    ui.plotly(
        make_masked_weights_figure(broken.weights, labels, ~blocked_by(bug.buggy), title=t("masks.fig_bug")),
        "mask_bug_fig",
    )
bug_leak = ui.cached(
    "mask_leak",
    (*settings.key(n_tokens), mask_digest(bug.buggy)),
    lambda: leak_test(source, settings.text, n_tokens, bug.buggy),
    t("masks.bug_leak_spinner"),
)
st.markdown(describe_bug_effect(broken, bug_leak))

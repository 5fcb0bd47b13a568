"""Mask lab: build any mask, see what it does to real attention, a gallery of mask bugs, and a mask doctor."""

import streamlit as st

from attnviz import settings as limits
from attnviz import ui
from attnviz.mask_doctor import diagnose, parse_expect
from attnviz.mask_effects import blocked_by, describe_bug_effect, head_effect, leak_test, mask_digest
from attnviz.mask_figures import make_difference_figure, make_leak_figure, make_mask_figure, make_masked_weights_figure
from attnviz.mask_gallery import gallery, gallery_table
from attnviz.source import ModelUnavailableError
from attnviz.token_display import markdown_text

st.title("Mask lab")
st.markdown(
    "A mask decides which keys each query may see. A wrong one fails silently: the model still answers, but a "
    "decoder reads the future (the tutorial's *garbled generation*), pads leak into sentences, or a row with no key "
    "left turns into NaN. Build a mask or bring your own, and see what it does to this model's real attention "
    "(one head, from the same q and k as the Heads page), what the **mask doctor** finds in it, and whether changing "
    "later tokens moves earlier outputs."
)
settings = ui.frame_settings()
source = ui.require_source(settings)
ui.require_text(settings)
n_tokens = min(settings.max_tokens, limits.MASK_TOKENS)
try:
    record = ui.cached("record", settings.key(n_tokens), lambda: source.run(settings.text, n_tokens), "Capturing…")
except (ModelUnavailableError, ValueError) as err:
    st.error(str(err))
    st.stop()
T, labels = record.q_len, record.labels()
if T < 2:
    st.info("A mask needs at least two tokens to say anything: type a longer text.")
    st.stop()
if record.truncated:
    st.caption(f"The lab runs the whole model once per mask and per test, so it reads the first {T} tokens.")


st.subheader("1. Build a mask")
lab = ui.lab_mask_input(labels, source.causal)

own = "causal" if source.causal else None
# the labels never change, or the radio would be drawn anew (and empty) when the model or the mask does
choices = {
    "model": "the model's own mask",
    "built": "what the mask was built as",
    "none": "nothing: structural checks only",
    "custom": "another expectation…",
}
cols = st.columns([2, 1])
meant = cols[0].radio("The doctor checks it against", list(choices), format_func=choices.get, key="mask_meant")
expect_text = {"model": own, "none": None, "built": lab.expect}.get(meant)
if meant == "custom":
    expect_text = cols[1].text_input(
        "causal, padding, causal+padding, sliding:W or prefix:P", "causal", key="mask_expect_text"
    )
else:
    cols[1].caption(f"Expected: {expect_text or 'nothing (a custom mask or an encoder: every key)'}.")
try:
    expect = parse_expect(expect_text) if expect_text else None
except ValueError as err:
    st.error(f"Invalid expectation: {err}")
    st.stop()
lengths = lab.lengths if expect is not None and "padding" in expect.kind else None
diagnosis = diagnose(lab.raw, convention=lab.convention, expect=expect, lengths=lengths, side=lab.side)

st.subheader("2. What it does to one head")
layer, head = ui.layer_head_picker(record.n_layer, record.n_head, key="mask", with_mean=False)
effect = head_effect(record, layer, head, lab.acting, lab.keep)
cols = st.columns(3)
cols[0].metric("largest weight on a hidden key", f"{effect.leaked:.3g}", help="0 when the mask hides what it says")
cols[1].metric("NaN rows", len(effect.nan_rows), help="query rows with no key left: a plain softmax divides 0 by 0")
cols[2].metric("largest change against the model's own mask", f"{effect.changed:.3g}")
problems = {p.kind: p.cells for p in diagnosis.problems if p.cells is not None and p.cells.shape == lab.keep.shape}
left, right = st.columns(2)
with left:
    ui.plotly(
        make_mask_figure(lab.keep, labels, problems=problems, title="the mask (x: the doctor's findings)"), "mask_fig"
    )
    ui.plotly(make_masked_weights_figure(effect.weights, labels, lab.keep, title="with it"), "mask_with")
with right:
    ui.plotly(
        make_masked_weights_figure(effect.reference, labels, record.mask(layer), title="without it: the model's own"),
        "mask_without",
    )
    ui.plotly(make_difference_figure(effect.difference, labels, title="difference: with − without"), "mask_diff")
st.caption(
    f"Layer {layer}, head {head}, over this text's {T} tokens. *Without it* is the model's own attention (the "
    f"reference: {record.keys(layer).describe()}); *with it* recomputes the same scores (q·k, after RoPE) under "
    "your mask as a plain softmax does: grey cells are hidden, a red row has no key left and is NaN."
)

st.subheader("3. The mask doctor")
if diagnosis.ok:
    st.success(f"No problem found ({diagnosis.convention} mask, shape {list(diagnosis.shape)}).")
else:
    st.error(
        f"{len(diagnosis.problems)} problem(s) in this {diagnosis.convention} mask of shape {list(diagnosis.shape)}."
    )
    for problem in diagnosis.problems:
        st.markdown(f"- **{problem.kind}** ({problem.count:,}): {markdown_text(problem.message)}")
for note in diagnosis.notes:
    st.caption(note)

leak = ui.cached(
    "mask_leak",
    (*settings.key(n_tokens), mask_digest(lab.acting)),
    lambda: leak_test(source, settings.text, n_tokens, lab.acting),
    "Changing later tokens and rerunning the model…",
)
st.markdown(f"**Leak test on the whole model.** {leak.describe()}")
ui.plotly(make_leak_figure(leak.change, labels, leak.tolerance, leak.cuts), "mask_leak_fig")

st.subheader("4. Bug gallery")
bugs = gallery(T, source.causal)
st.dataframe(gallery_table(bugs, record, layer, head), key="mask_gallery_table", hide_index=True, width="stretch")
st.caption(
    f"On layer {layer}, head {head}. Weight on hidden keys: the largest weight the bug puts where the fix hides."
)
ui.valid_choice("mask_bug", range(len(bugs)), 0)
pick = st.selectbox("Look at one", range(len(bugs)), format_func=lambda i: bugs[i].title, key="mask_bug")
bug = bugs[pick]
st.markdown(f"{bug.what}\n\n**Fix:** {bug.fix}")
fixed = head_effect(record, layer, head, bug.correct, bug.intended)
broken = head_effect(record, layer, head, bug.buggy, bug.intended)
left, right = st.columns(2)
with left:
    ui.plotly(make_masked_weights_figure(fixed.weights, labels, bug.intended, title="correct"), "mask_bug_correct")
with right:
    ui.plotly(
        make_masked_weights_figure(broken.weights, labels, ~blocked_by(bug.buggy), title="the bug"), "mask_bug_fig"
    )
bug_leak = ui.cached(
    "mask_leak",
    (*settings.key(n_tokens), mask_digest(bug.buggy)),
    lambda: leak_test(source, settings.text, n_tokens, bug.buggy),
    "Running the leak test on the bug…",
)
st.markdown(describe_bug_effect(broken, bug_leak))

"""Head roles: what each head does, which heads duplicate each other, and whether either holds across prompts."""

import streamlit as st

from attnviz import head_roles, ui
from attnviz import settings as limits
from attnviz.head_roles_figures import (
    make_head_roles_figure,
    make_head_similarity_figure,
    make_role_stability_figure,
    make_sink_vs_length_figure,
)
from attnviz.source import ModelUnavailableError, ParityUnsupportedError
from attnviz.token_display import markdown_text

EXAMPLES, MINE = "the app's examples", "my prompts"

st.title("Head roles")
settings = ui.frame_settings()
record = ui.current_record(settings)
if record is None:
    st.stop()
source = ui.require_source(settings)
key = settings.key()
if "roles_prompts" not in st.session_state:
    st.session_state.roles_prompts = ""

st.subheader("What each head does")
outputs, seconds = None, head_roles.output_seconds(source, settings.max_tokens)
cheap = head_roles.output_cost_macs(source, settings.max_tokens) <= head_roles.OUTPUT_AUTO_MACS
measure = cheap or st.toggle(
    f"Find dead heads: rerun each of the {source.n_layer} layers on the first "
    f"{min(settings.max_tokens, head_roles.OUTPUT_TOKENS)} tokens (about {seconds:,.0f} s)",
    key="roles_dead",
)
if measure:
    try:
        outputs = ui.cached(
            "head_outputs",
            settings.key(min(settings.max_tokens, head_roles.OUTPUT_TOKENS)),
            lambda: head_roles.head_output_norms(source, settings.text, settings.max_tokens),
            f"Measuring every head's output (about {seconds:,.0f} s)…",
        )
    except ParityUnsupportedError as err:
        st.info(
            f"The *dead* role is not available for this model: {markdown_text(str(err))}. A dead head is one whose "
            "output barely moves the layer's, and attnviz measures that by rerunning each layer with its own "
            "MultiHeadAttention."
        )
    except (ModelUnavailableError, ValueError) as err:
        st.error(f"The *dead* role is not available: {markdown_text(str(err))}")
roles = ui.cached(
    "head_roles", (*key, outputs is not None), lambda: head_roles.head_roles(record, outputs), "Labelling every head…"
)
ui.plotly(make_head_roles_figure(roles), key="roles_map")
st.dataframe(roles, key="roles_table", hide_index=True, width="stretch")
dead = (
    f"output_norm: the mean norm of the head's weighted sum of V through its slice of W_O, on the first "
    f"{outputs.n_tokens:,} tokens (at most {head_roles.OUTPUT_TOKENS}: one rerun of each layer); output_share: over "
    "the layer's median head."
    if outputs is not None
    else "No head is marked dead: "
    + ("the dead role is not available for this model (see above)." if measure else "outputs not measured (above).")
)
st.caption(
    f"Row-averaged over the query rows that see two keys. Roles: {head_roles.describe_roles()} "
    f"entropy_without_sink: the entropy (nats) left once the first token is removed and the rest renormalised. {dead}"
)

st.subheader("Which heads do the same thing")
try:
    similarity = ui.cached("head_similarity", key, lambda: head_roles.head_similarity(record), "Comparing heads…")
except ValueError as err:
    st.info(str(err))
    similarity = None
if similarity is not None:
    threshold = st.slider(
        "Redundant below this JS distance", 0.01, 1.0, head_roles.REDUNDANT_DISTANCE, 0.01, key="roles_threshold"
    )
    ui.plotly(make_head_similarity_figure(similarity, threshold=threshold), key="roles_similarity")
    groups = similarity.groups(threshold)
    st.caption(f"{similarity.note} Ordered by average-linkage clustering; boxes mark redundant groups.")
    if groups:
        st.markdown("\n".join(f"- {', '.join(similarity.label(i) for i in group)}" for group in groups))
    else:
        st.caption(f"No two heads are closer than {threshold:g}.")

st.subheader("Across prompts")
n_prompt_tokens = min(settings.max_tokens, head_roles.STABILITY_TOKENS)
which = st.radio("Prompts", (EXAMPLES, MINE), key="roles_prompt_source", horizontal=True)
if which == MINE:
    st.text_area(
        "My prompts, one per line",
        key="roles_prompts",
        height=140,
        max_chars=head_roles.STABILITY_PROMPT_CHARS,
        placeholder="The cat sat on the mat.\nThe trophy did not fit in the suitcase.",
    )
    texts, ignored = head_roles.parse_prompts(st.session_state.roles_prompts)
    st.caption(
        f"At most {head_roles.STABILITY_MAX_PROMPTS} prompts, each cut to {n_prompt_tokens:,} tokens (the sidebar's "
        f"max tokens, at most {head_roles.STABILITY_TOKENS}); empty lines are ignored."
    )
    if ignored:
        st.warning(
            f"{ignored} more line(s) ignored: only the first {head_roles.STABILITY_MAX_PROMPTS} prompts are read."
        )
else:
    texts = list(limits.EXAMPLES.values())
with_outputs = outputs is not None and cheap  # n_layer reruns a prompt: only where that takes about a second
runs = f"runs the model {len(texts)} times" + (
    f", and reruns its {source.n_layer} layers on each" if with_outputs else ""
)
if not texts:
    st.info("Type at least one prompt, one per line.")
elif st.toggle(f"Roles over {len(texts)} prompt(s) ({runs})", key="roles_stability"):
    try:
        stability = ui.cached(
            "role_stability",
            (settings.spec, tuple(texts), n_prompt_tokens, with_outputs),
            lambda: head_roles.role_stability(source, texts, n_prompt_tokens, with_outputs=with_outputs),
            "Labelling heads on every prompt…",
        )
        ui.plotly(make_role_stability_figure(stability), key="roles_stability_fig")
        if not with_outputs:
            st.caption("Roles from attention alone: dead heads are found on the sidebar's text only, for this model.")
    except (ModelUnavailableError, ValueError) as err:
        st.error(markdown_text(str(err)))

st.subheader("The attention sink against length")
if st.toggle("Weight on the first token as the input grows (the sidebar's text, repeated)", key="roles_sink"):
    choices = [n for n in head_roles.SINK_CHOICES if n <= source.max_positions]
    lengths = st.multiselect(
        "Lengths", choices, default=[n for n in head_roles.SINK_LENGTHS if n in choices], key="roles_lengths"
    )
    if lengths and settings.text.strip():
        sink_key = (settings.spec, settings.text, head_roles.sink_lengths(source, lengths))
        seconds = head_roles.sink_seconds(source, lengths)
        st.caption(
            f"One capture per length, one after another: about {seconds:,.0f} s for these on a 2-core CPU "
            f"(8,192 tokens on SmolLM2: about {head_roles.SINK_8192_SECONDS:.0f} s and {head_roles.SINK_8192_MB:,} MB "
            f"above the model); at most {head_roles.SINK_MAX_CELLS:.2e} attention cells a request (layers x heads x "
            "the squared lengths: every length on SmolLM2)."
        )
        try:
            head_roles.check_sink_cost(source, lengths)
            ready = ("sink_vs_length", sink_key) in ui.result_cache() or seconds <= head_roles.SINK_CONFIRM_SECONDS
            if not ready:
                st.warning(f"This takes about {seconds:,.0f} s, during which the page waits.")
                ready = st.button(f"Run it (about {seconds:,.0f} s)", key="roles_sink_run")
            if ready:
                sinks = ui.cached(
                    "sink_vs_length",
                    sink_key,
                    lambda: head_roles.sink_vs_length(source, settings.text, tuple(lengths)),
                    f"Capturing at every length (about {seconds:,.0f} s)…",
                )
                ui.plotly(make_sink_vs_length_figure(sinks), key="roles_sink_fig")
        except (ModelUnavailableError, ValueError) as err:
            st.error(markdown_text(str(err)))

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
from attnviz.source import ModelUnavailableError

st.title("Head roles")
settings = ui.frame_settings()
record = ui.current_record(settings)
if record is None:
    st.stop()
source = ui.require_source(settings)
key = settings.key()

st.subheader("What each head does")
roles = ui.cached("head_roles", key, lambda: head_roles.head_roles(record), "Labelling every head…")
ui.plotly(make_head_roles_figure(roles), key="roles_map")
st.dataframe(roles, key="roles_table", hide_index=True, width="stretch")
st.caption(
    f"Row-averaged over the query rows that see two keys. Roles: {head_roles.describe_roles()} "
    "entropy_without_sink: the entropy (nats) left once the first token is removed and the rest renormalised. "
    "There is no *dead* role: that is about a head's output, and the record holds only its attention."
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
texts = list(limits.EXAMPLES.values())
if st.toggle(f"Roles over the app's {len(texts)} examples (runs the model {len(texts)} times)", key="roles_stability"):
    try:
        stability = ui.cached(
            "role_stability",
            (settings.spec, tuple(texts), settings.max_tokens),
            lambda: head_roles.role_stability(source, texts, settings.max_tokens),
            "Labelling heads on every example…",
        )
        ui.plotly(make_role_stability_figure(stability), key="roles_stability_fig")
    except (ModelUnavailableError, ValueError) as err:
        st.error(str(err))

st.subheader("The attention sink against length")
if st.toggle("Weight on the first token as the input grows (the sidebar's text, repeated)", key="roles_sink"):
    choices = [n for n in (64, 128, 256, 512, 1024, 2048, 4096, 8192) if n <= source.max_positions]
    lengths = st.multiselect(
        "Lengths", choices, default=[n for n in head_roles.SINK_LENGTHS if n in choices], key="roles_lengths"
    )
    if lengths and settings.text.strip():
        try:
            sinks = ui.cached(
                "sink_vs_length",
                (settings.spec, settings.text, tuple(sorted(lengths))),
                lambda: head_roles.sink_vs_length(source, settings.text, tuple(lengths)),
                "Capturing at every length…",
            )
            ui.plotly(make_sink_vs_length_figure(sinks), key="roles_sink_fig")
        except (ModelUnavailableError, ValueError) as err:
            st.error(str(err))

"""Head roles: what each head does, which heads duplicate each other, and whether either holds across prompts."""

import streamlit as st

from attnviz.app.loading import cached, cached_job, current_record, require_source, result_cache
from attnviz.app.navigation import frame_settings
from attnviz.app.weights_note import random_weights_note
from attnviz.app.widgets import plotly, show_error, show_info, table
from attnviz.errors import ModelUnavailableError, ParityUnsupportedError
from attnviz.figures.head_roles import (
    make_head_roles_figure,
    make_head_similarity_figure,
    make_role_stability_figure,
    make_sink_vs_length_figure,
)
from attnviz.i18n.message import msg
from attnviz.i18n.translate import t
from attnviz.labs import head_roles
from pages.widgets.head_roles import stability_prompts

st.title(t("head_roles.title"))
settings = frame_settings()
record = current_record(settings)
if record is None:
    st.stop()
source = require_source(settings)
key = settings.key()

st.subheader(t("head_roles.what_each_does"))
random_weights_note(source)  # a random model's roles are noise
outputs, seconds = None, head_roles.output_seconds(source, settings.max_tokens)
cheap = head_roles.outputs_by_themselves(source, settings.max_tokens)
measure = cheap or st.toggle(
    t(
        "head_roles.find_dead",
        n_layer=source.n_layer,
        tokens=min(settings.max_tokens, head_roles.OUTPUT_TOKENS),
        seconds=seconds,
    ),
    key="roles_dead",
)
if measure:
    try:
        outputs = cached_job(
            "head_outputs",
            settings.key(min(settings.max_tokens, head_roles.OUTPUT_TOKENS)),
            lambda progress: head_roles.head_output_norms(source, settings.text, settings.max_tokens, progress),
            t("head_roles.measuring_outputs"),
        )
    except ParityUnsupportedError as err:
        show_info(msg("head_roles.dead_unsupported", error=err))
    except (ModelUnavailableError, ValueError) as err:
        show_error(msg("head_roles.dead_unavailable", error=err))
roles = cached(
    "head_roles", (*key, outputs is not None), lambda: head_roles.head_roles(record, outputs), t("head_roles.labelling")
)
plotly(make_head_roles_figure(roles), key="roles_map")
table(roles, key="roles_table", hide_index=True, width="stretch")
if outputs is not None:
    dead = t("head_roles.output_columns", n_tokens=outputs.n_tokens, max_tokens=head_roles.OUTPUT_TOKENS)
else:
    dead = t("head_roles.no_dead_unavailable") if measure else t("head_roles.no_dead_unmeasured")
st.caption(t("head_roles.roles_caption", roles=head_roles.describe_roles(), dead=dead))

st.subheader(t("head_roles.which_same"))
try:
    similarity = cached(  # its note is a message: one entry serves every language
        "head_similarity",
        key,
        lambda: head_roles.head_similarity(record, source.device),
        t("head_roles.comparing"),
    )
except ValueError as err:
    show_info(err)
    similarity = None


@st.fragment
def similar_heads(similarity) -> None:
    """The similarity map and its groups: the threshold slider redraws this section only."""
    threshold = st.slider(
        t("head_roles.redundant_below"), 0.01, 1.0, head_roles.REDUNDANT_DISTANCE, 0.01, key="roles_threshold"
    )
    plotly(make_head_similarity_figure(similarity, threshold=threshold), key="roles_similarity")
    groups = similarity.groups(threshold)
    st.caption(t("head_roles.similarity_caption", note=similarity.note))
    if groups:
        st.markdown("\n".join(f"- {', '.join(similarity.label(i) for i in group)}" for group in groups))
    else:
        st.caption(t("head_roles.none_closer", threshold=threshold))


if similarity is not None:
    similar_heads(similarity)

st.subheader(t("head_roles.across_prompts"))
n_prompt_tokens = min(settings.max_tokens, head_roles.STABILITY_TOKENS)
texts = stability_prompts(n_prompt_tokens)
with_outputs = outputs is not None and cheap  # one more pass a prompt: only where that is cheap
runs = (
    t("head_roles.runs_with_outputs", n=len(texts), n_layer=source.n_layer)
    if with_outputs
    else t("head_roles.runs", n=len(texts))
)
if not texts:
    st.info(t("head_roles.type_a_prompt"))
elif st.toggle(t("head_roles.stability_toggle", n=len(texts), runs=runs), key="roles_stability"):
    try:
        stability = cached_job(
            "role_stability",
            (settings.spec, tuple(texts), n_prompt_tokens, with_outputs),
            lambda progress: head_roles.role_stability(
                source, texts, n_prompt_tokens, with_outputs=with_outputs, progress=progress
            ),
            t("head_roles.labelling_prompts"),
        )
        plotly(make_role_stability_figure(stability), key="roles_stability_fig")
        if not with_outputs:
            st.caption(t("head_roles.attention_alone"))
    except (ModelUnavailableError, ValueError) as err:
        show_error(err)

st.subheader(t("head_roles.sink"))
if st.toggle(t("head_roles.sink_toggle"), key="roles_sink"):
    choices = [n for n in head_roles.SINK_CHOICES if n <= source.max_positions]
    lengths = st.multiselect(
        t("head_roles.lengths"),
        choices,
        default=[n for n in head_roles.SINK_LENGTHS if n in choices],
        key="roles_lengths",
    )
    if lengths and settings.text.strip():
        sink_key = (settings.spec, settings.text, head_roles.sink_lengths(source, lengths))
        seconds = head_roles.sink_seconds(source, lengths)
        st.caption(
            t(
                "head_roles.sink_caption",
                seconds=seconds,
                seconds_8192=head_roles.SINK_8192_SECONDS,
                mb_8192=head_roles.SINK_8192_MB,
                max_cells=head_roles.SINK_MAX_CELLS,
            )
        )
        try:
            head_roles.check_sink_cost(source, lengths)
            ready = ("sink_vs_length", sink_key) in result_cache() or seconds <= head_roles.SINK_CONFIRM_SECONDS
            if not ready:
                st.warning(t("head_roles.sink_slow", seconds=seconds))
                ready = st.button(t("head_roles.sink_run", seconds=seconds), key="roles_sink_run")
            if ready:
                sinks = cached_job(
                    "sink_vs_length",
                    sink_key,
                    lambda progress: head_roles.sink_vs_length(source, settings.text, tuple(lengths), progress),
                    t("head_roles.sink_capturing"),
                )
                plotly(make_sink_vs_length_figure(sinks), key="roles_sink_fig")
        except (ModelUnavailableError, ValueError) as err:
            show_error(err)

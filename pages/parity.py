"""Parity: attnviz's attention, fed a pretrained model's weights, reproduces that model's attention."""

import streamlit as st

from attnviz import settings as limits
from attnviz.app.loading import cached, require_source, require_text
from attnviz.app.navigation import frame_settings
from attnviz.app.widgets import layer_head_picker, plotly, show_error, show_info
from attnviz.errors import ModelUnavailableError, ParityUnsupportedError
from attnviz.figures.base import column_width, make_head_heatmap_figure
from attnviz.figures.parity import make_parity_figure
from attnviz.i18n.message import msg
from attnviz.i18n.translate import t, tr
from attnviz.models.record import token_labels
from attnviz.models.source import Capability

st.title(t("parity.title"))
st.markdown(t("parity.intro"))
settings = frame_settings()
source = require_source(settings)
if Capability.REPRODUCE not in source.capabilities:
    if source.description.random_weights:
        why = t("parity.why_embedded")
    else:
        why = t("parity.why_unsupported") if Capability.KEEP_QK in source.capabilities else tr(source.route_note)
    st.info(t("parity.unsupported", why=why))
    st.stop()
require_text(settings)
n_tokens = min(settings.max_tokens, limits.PARITY_TOKENS)
# option values stay the bug names (session state and links keep them); the labels are the session's language
bugs = {None: t("parity.no_bug"), **{name: tr(title) for name, title in source.parity_bugs().items()}}
bug = st.radio(t("parity.break_it"), list(bugs), format_func=bugs.get, key="parity_bug")
try:
    parity = cached(
        "parity",
        (*settings.key(n_tokens), bug),
        lambda: source.check_parity(settings.text, n_tokens, bug),
        t("parity.running"),
    )
except ParityUnsupportedError as err:  # found only once the layers are read (relative position embeddings)
    show_info(msg("parity.unsupported", why=err))
    st.stop()
except ModelUnavailableError as err:
    show_error(err)
    st.stop()
T = parity.ours.shape[-1]
if settings.max_tokens > limits.PARITY_TOKENS:
    st.caption(t("parity.first_tokens", n=limits.PARITY_TOKENS))

cols = st.columns(4)
cols[0].metric(t("parity.metric_worst"), f"{parity.worst:.2e}")
cols[1].metric(t("parity.metric_tolerance"), f"{parity.tolerance:.0e}")
cols[2].metric(t("parity.metric_heads"), f"{parity.max_abs_diff.numel()}")
cols[3].metric(t("parity.metric_tokens"), T)
if parity.matches:
    st.success(t("parity.matches", worst=parity.worst, masks=", ".join(sorted({tr(mask) for mask in parity.masks}))))
elif bug is not None:
    st.error(t("parity.caught", bug=bugs[bug], worst=parity.worst))
else:
    st.error(t("parity.differs", worst=parity.worst))
plotly(make_parity_figure(parity.max_abs_diff, parity.tolerance), key="parity_diffs")

layer, head = layer_head_picker(parity.ours.shape[0], parity.ours.shape[1], key="parity", with_mean=False)
labels = token_labels(parity.tokens)
mask = parity.keys[layer].dense()
left, right = st.columns(2)
with left:
    fig = make_head_heatmap_figure(
        parity.ours[layer, head], labels, labels, title="attnviz", mask=mask, max_width=column_width(2)
    )
    plotly(fig, key="parity_ours")
with right:
    fig = make_head_heatmap_figure(
        parity.theirs[layer, head], labels, labels, title=t("parity.fig_theirs"), mask=mask, max_width=column_width(2)
    )
    plotly(fig, key="parity_theirs")
st.caption(t("parity.full_resolution", T=T))

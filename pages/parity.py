"""Parity: attnviz's attention, fed a pretrained model's weights, reproduces that model's attention."""

import streamlit as st

from attnviz import settings as limits
from attnviz import ui
from attnviz.figures import make_head_heatmap_figure, make_parity_figure
from attnviz.i18n import t
from attnviz.parity import PARITY_TOLERANCE, bug_title
from attnviz.record import token_labels
from attnviz.source import ModelUnavailableError, ParityUnsupportedError
from attnviz.token_display import markdown_text

st.title(t("parity.title"))
st.markdown(t("parity.intro"))
settings = ui.frame_settings()
source = ui.require_source(settings)
if not source.supports_parity:
    why = t("parity.why_embedded") if source.random_weights else t("parity.why_unsupported")
    st.info(t("parity.unsupported", why=why))
    st.stop()
ui.require_text(settings)
n_tokens = min(settings.max_tokens, limits.PARITY_TOKENS)
# option values stay the bug names (session state and links keep them); the labels are the session's language
bugs = {None: t("parity.no_bug"), **{name: bug_title(name) for name in source.parity_bugs()}}
bug = st.radio(t("parity.break_it"), list(bugs), format_func=bugs.get, key="parity_bug")
try:
    parity = ui.cached(
        "parity",
        (*settings.key(n_tokens), bug),
        lambda: source.check_parity(settings.text, n_tokens, bug),
        t("parity.running"),
    )
except ParityUnsupportedError as err:  # found only once the layers are read (relative position embeddings)
    st.info(t("parity.unsupported", why=markdown_text(str(err))))
    st.stop()
except ModelUnavailableError as err:
    st.error(markdown_text(str(err)))
    st.stop()
T = parity.ours.shape[-1]
if settings.max_tokens > limits.PARITY_TOKENS:
    st.caption(t("parity.first_tokens", n=limits.PARITY_TOKENS))

cols = st.columns(4)
cols[0].metric(t("parity.metric_worst"), f"{parity.worst:.2e}")
cols[1].metric(t("parity.metric_tolerance"), f"{PARITY_TOLERANCE:.0e}")
cols[2].metric(t("parity.metric_heads"), f"{parity.max_abs_diff.numel()}")
cols[3].metric(t("parity.metric_tokens"), T)
if parity.matches:
    st.success(t("parity.matches", worst=parity.worst, masks=", ".join(sorted(set(parity.masks)))))
elif bug is not None:
    st.error(t("parity.caught", bug=bugs[bug], worst=parity.worst))
else:
    st.error(t("parity.differs", worst=parity.worst))
ui.plotly(make_parity_figure(parity.max_abs_diff), key="parity_diffs")

layer, head = ui.layer_head_picker(parity.ours.shape[0], parity.ours.shape[1], key="parity", with_mean=False)
labels = token_labels(parity.tokens)
mask = parity.keys[layer].dense()
left, right = st.columns(2)
with left:
    fig = make_head_heatmap_figure(parity.ours[layer, head], labels, labels, title="attnviz", mask=mask)
    ui.plotly(fig, key="parity_ours")
with right:
    fig = make_head_heatmap_figure(parity.theirs[layer, head], labels, labels, title=t("parity.fig_theirs"), mask=mask)
    ui.plotly(fig, key="parity_theirs")
st.caption(t("parity.full_resolution", T=T))

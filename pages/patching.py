"""Patching: which heads carry the difference between two texts, and what each head adds to one token's logit."""

import streamlit as st

from attnviz.app.loading import require_source
from attnviz.app.navigation import frame_settings
from attnviz.app.weights_note import random_weights_note
from attnviz.app.widgets import show_error, show_info, tab_picker
from attnviz.errors import ModelUnavailableError
from attnviz.i18n.message import msg
from attnviz.i18n.translate import t
from attnviz.models.source import Capability
from pages.widgets.patching import direct_logit_section, patch_section

st.title(t("patching.title"))
settings = frame_settings()
source = require_source(settings)
if Capability.EDIT_HEADS not in source.capabilities:
    show_info(msg("patching.unsupported", name=source.name, note=source.route_note))
    st.stop()
st.caption(t("patching.intro"))
random_weights_note(source)  # a random model's patching effects are noise (attnviz.app.weights_note)
sections = {"patching.tab_patch": patch_section, "patching.tab_logits": direct_logit_section}
try:  # only the open tab computes
    sections[tab_picker(list(sections), "patching_tab")](source, settings)
except (ModelUnavailableError, ValueError) as err:
    show_error(err)

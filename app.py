"""attnviz: see what multi-head attention does to the text you type.

The entry point: page config, the shared sidebar (text, model, device, max
tokens) and the page navigation, in sections. Run with ``streamlit run app.py``.
"""

import streamlit as st

from attnviz.app.navigation import MENU_POSITION, leave_legacy_multipage_mode, pages
from attnviz.app.replica import note_moved_session
from attnviz.app.sidebar import sidebar
from attnviz.app.widgets import run_page

st.set_page_config(page_title="attnviz", page_icon="🔍", layout="wide")
leave_legacy_multipage_mode()

st.session_state["settings"] = sidebar()
note_moved_session()  # behind nginx: a session that moved here from a replica that stopped

run_page(st.navigation(pages(), position=MENU_POSITION))  # the menu in the header: the sidebar opens on text and model

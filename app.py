"""attnviz: see what multi-head attention does to the text you type.

The entry point: page config, the shared sidebar (text, model, device, max
tokens) and the page navigation. Run with ``streamlit run app.py``.
"""

import streamlit as st

from attnviz import ui

st.set_page_config(page_title="attnviz", page_icon="🔍", layout="wide")
ui.leave_legacy_multipage_mode()

st.session_state["settings"] = ui.sidebar()

st.navigation(ui.pages(), expanded=True).run()  # every page listed: no "View 3 more" (English only)

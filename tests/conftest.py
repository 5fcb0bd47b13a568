"""Shared test set-up."""

import pytest
from streamlit.runtime.pages_manager import PagesManager


@pytest.fixture(autouse=True)
def _navigation_v2(monkeypatch):
    """Make AppTest rerun app.py on every page, as the real server does.

    AppTest resets ``PagesManager.uses_pages_directory`` before each run, and
    because a ``pages/`` folder exists it becomes True, so a rerun on a
    non-main page executes that page file alone (the legacy v1 multipage mode)
    and skips app.py's sidebar. The server sets the flag once and
    ``st.navigation`` clears it on the first run, so every later run executes
    app.py. Clearing it here reproduces that.
    """
    original = PagesManager.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        PagesManager.uses_pages_directory = False

    monkeypatch.setattr(PagesManager, "__init__", init)

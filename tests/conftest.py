"""Shared test set-up.

Tests run offline (HF_HUB_OFFLINE=1: nothing may come from a hub) with a fresh
XDG cache, so every run converts SmolLM2's GGUF exactly as a new user's first
start does. The bundled models are installed by `make test`; a test that needs
one fails, never skips, when it is missing.
"""

import os
import shutil
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
TEST_CACHE = tempfile.mkdtemp(prefix="attnviz-test-cache-")
os.environ["XDG_CACHE_HOME"] = TEST_CACHE

import pytest  # noqa: E402
from streamlit.runtime.pages_manager import PagesManager  # noqa: E402


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(TEST_CACHE, ignore_errors=True)


@pytest.fixture(scope="session")
def smollm2():
    from attnviz.models.hf.loading import load_hf_source

    return load_hf_source("smollm2")


@pytest.fixture(scope="session")
def minilm():
    from attnviz.models.hf.loading import load_hf_source

    return load_hf_source("minilm")


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

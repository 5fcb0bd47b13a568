"""Fixtures and checks shared by the real-browser tests: one Chromium per module (launching takes a second; its
event loop ends with the module), one app server per test process (each browser module is an xdist group of its
own: a worker starts the server for the first it runs and keeps it for the others), a fresh context, so a new
user's session, per test."""

import pytest

from attnviz import settings
from tools.browser import chromium_browser, streamlit_server

# a serve.py under test that is not the tour's: without the tour's background warm-up, whose minute of trainings
# would share the 2 cores with the page loads these tests time (the tour's own browser test keeps it)
NO_TOUR_WARM = {settings.TOUR_WARM_ENV: "0"}


@pytest.fixture(scope="module")
def browser():
    with chromium_browser() as b:
        yield b


@pytest.fixture(scope="session")
def server(smollm2):
    """One app server for this worker's browser tests (each test is a new session of it). SmolLM2 is converted
    first (same XDG cache), so the server starts on a ready model."""
    with streamlit_server() as url:
        yield url


@pytest.fixture
def page(browser):
    """A new user's tab (1400 x 1600); the test fails if the page raised a JavaScript error."""
    context = browser.new_context(viewport={"width": 1400, "height": 1600})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    yield page
    context.close()
    assert not errors, errors


def assert_no_exception(page):
    """No Streamlit exception box on the page (its text in the failure message)."""
    assert page.locator('[data-testid="stException"]').count() == 0, page.locator(
        '[data-testid="stException"]'
    ).first.inner_text()


def websocket_bytes(page) -> list[int]:
    """The size of every websocket frame the page receives from the server from now on; clear it before an update."""
    received = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: received.append(len(payload))))
    return received

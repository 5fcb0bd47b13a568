"""Models and records load once per process; a language switch changes the words on the page, never reruns a model."""

import pytest
from streamlit.testing.v1 import AppTest

from attnviz.app.loading import result_cache
from attnviz.models.embedded.model import EmbeddedModel


def script():
    import streamlit as st

    from attnviz.app.loading import current_record
    from attnviz.app.sidebar import sidebar

    record = current_record(sidebar())
    if record is not None:
        st.text(f"{len(record.tokens)} tokens")


@pytest.fixture
def runs(monkeypatch):
    calls = []
    real = EmbeddedModel.run

    def counted(self, text, max_tokens, **kwargs):
        calls.append(text)
        return real(self, text, max_tokens, **kwargs)

    monkeypatch.setattr(EmbeddedModel, "run", counted)
    result_cache().clear()
    return calls


def test_the_record_is_captured_once_and_a_language_switch_reuses_it(runs):
    at = AppTest.from_function(script, default_timeout=60)
    at.session_state["n_layer"] = 1
    at.run()
    assert not at.exception and at.text[0].value == "11 tokens" and len(runs) == 1
    english = at.sidebar.selectbox(key="model").label
    at.sidebar.selectbox(key="lang").set_value("zh").run()
    assert not at.exception and at.sidebar.selectbox(key="model").label != english  # the words changed
    assert len(runs) == 1  # the capture did not
    at.sidebar.selectbox(key="lang").set_value("en").run()
    assert len(runs) == 1


def test_bad_embedded_settings_are_said_once_and_nothing_runs(runs):
    at = AppTest.from_function(script, default_timeout=60)
    at.session_state["d_model"], at.session_state["n_head"] = 30, 4
    at.run()
    assert not at.exception and not at.text and not runs
    assert len(at.error) == 2 and all("30" in e.value and "4" in e.value for e in at.error)  # sidebar, then the page

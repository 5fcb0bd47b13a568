"""Widget values kept to what the widgets offer: a stale choice is replaced, the type of a choice counts."""

from streamlit.testing.v1 import AppTest

from attnviz.app.state import DEFAULTS, Settings, offered


def test_a_value_is_offered_only_as_itself_type_included():
    assert offered(3, range(5)) and not offered(5, range(5)) and not offered("3", range(5))
    assert not offered(True, range(5))  # True == 1, but it is no layer
    assert offered("mean", [0, 1, "mean"]) and not offered(1.0, [0, 1, "mean"])


def test_settings_key_on_what_determines_a_record():
    settings = Settings(text="hi", max_tokens=64, spec=None)
    assert settings.key() == (None, "hi", 64) and settings.key(8) == (None, "hi", 8)
    assert DEFAULTS["max_tokens"] == 256 and DEFAULTS["model"] == "default"


def script():
    import streamlit as st

    from attnviz.app.state import valid_choice

    valid_choice("layer", range(st.session_state.get("n_layer", 6)), 0)
    valid_choice("heads", [0, 1, 2], [])
    st.selectbox("layer", range(st.session_state.get("n_layer", 6)), key="layer")


def test_a_choice_the_widget_no_longer_offers_goes_back_to_the_default():
    at = AppTest.from_function(script)
    at.session_state["layer"], at.session_state["heads"] = 29, [0, 7, 2]  # SmolLM2's layer 29, then MiniLM's six
    at.run()
    assert not at.exception and at.session_state["layer"] == 0 and at.session_state["heads"] == [0, 2]
    at.session_state["layer"] = 4
    at.run()
    assert at.session_state["layer"] == 4  # a choice still offered is kept

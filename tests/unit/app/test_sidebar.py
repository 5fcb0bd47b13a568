"""The shared sidebar: an example fills the text (a Chinese one moves MiniLM to SmolLM2), a path must be typed."""

import pytest
from streamlit.testing.v1 import AppTest


def script():
    import streamlit as st

    from attnviz.app.sidebar import sidebar

    settings = sidebar()
    st.text(repr((settings.text, settings.spec.source if settings.spec else None, settings.max_tokens)))
    if settings.error is not None:
        st.text(str(settings.error))
    if "example_note" in st.session_state:
        st.text(str(st.session_state.example_note))


def test_the_defaults_open_the_embedded_model_on_the_default_text():
    at = AppTest.from_function(script).run()
    assert not at.exception
    assert at.text[0].value == repr(("The cat sat on the mat because it was tired.", "default", 256))


def test_a_chinese_example_moves_minilm_to_smollm2_and_says_so():
    at = AppTest.from_function(script)
    at.session_state["model"] = "minilm"
    at.run()
    at.sidebar.selectbox(key="example").set_value("中文: 猫").run()
    assert not at.exception and at.text[0].value == repr(("猫坐在垫子上，因为它累了。", "smollm2", 256))
    assert "SmolLM2" in at.text[1].value


@pytest.mark.parametrize("model", ["default", "smollm2"])
def test_a_chinese_example_leaves_a_model_that_reads_it_where_it_is(model):
    at = AppTest.from_function(script)
    at.session_state["model"] = model
    at.run()
    at.sidebar.selectbox(key="example").set_value("中文: 注意力").run()
    assert not at.exception and at.text[0].value == repr(("注意力机制让每个词都能看到句子里的其他词。", model, 256))
    assert len(at.text) == 1  # no note: nothing was switched


def test_a_path_must_be_typed_before_anything_opens():
    at = AppTest.from_function(script)
    at.session_state["model"] = "path"
    at.run()
    assert not at.exception and at.text[0].value.endswith("None, 256)") and len(at.error) == 1
    assert (
        at.text[1].value == "Invalid model settings: type the path of a local Hugging Face model folder (or a hub id)"
    )


def test_the_example_box_says_custom_text_once_the_text_is_no_example():
    from attnviz import settings
    from attnviz.app.sidebar import CUSTOM_TEXT, example_for

    cat = settings.DEFAULT_EXAMPLE
    assert example_for(settings.EXAMPLES[cat], cat) == cat
    assert example_for("my own words", cat) == CUSTOM_TEXT
    assert example_for(settings.EXAMPLES["中文: 猫"], cat) == "中文: 猫"  # a link holding an example's text names it
    at = AppTest.from_function(script).run()
    assert at.sidebar.selectbox(key="example").value == cat
    at.sidebar.text_area(key="text").input("my own words").run()
    box = at.sidebar.selectbox(key="example")
    assert not at.exception and box.value == CUSTOM_TEXT and "Your own text" in box.options
    assert at.text[0].value == repr(("my own words", "default", 256))
    box.set_value(CUSTOM_TEXT).run()  # choosing it changes nothing
    assert at.text[0].value == repr(("my own words", "default", 256))
    at.sidebar.selectbox(key="example").set_value(cat).run()  # an example puts its text back
    assert at.text[0].value == repr((settings.EXAMPLES[cat], "default", 256))
    assert at.sidebar.selectbox(key="example").value == cat

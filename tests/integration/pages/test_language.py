"""English / 中文 through AppTest: the sidebar's switch, the ``lang`` link parameter, nothing typed is lost."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from attnviz.i18n.translate import set_language

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _english_after():
    """AppTest formats a widget's options in the test's thread: the tests set that thread's language as the
    session's, and it goes back to English after."""
    yield
    set_language("en")


def test_switching_to_chinese_relabels_the_sidebar_and_keeps_what_was_typed():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    assert at.selectbox(key="lang").value == "en" and at.text_area(key="text").label == "Text to analyse"
    at.text_area(key="text").input("hello there friends").run()
    at.selectbox(key="lang").set_value("zh").run()  # this run's widgets were labelled in English
    set_language("zh")  # from here, in Chinese
    assert not at.exception
    assert at.text_area(key="text").label == "要分析的文本" and at.text_area(key="text").value == "hello there friends"
    assert [h.value for h in at.sidebar.header] == ["文本", "模型", "设备"]
    assert at.query_params["lang"] == "zh"  # a link copied now opens in Chinese
    at.switch_page("pages/heads.py").run()
    assert not at.exception and at.selectbox(key="lang").value == "zh"


def test_a_link_with_lang_opens_in_that_language_and_keeps_its_other_parameters():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params["lang"] = "zh"
    at.query_params["layer"] = "1"
    set_language("zh")
    at.run()
    assert at.selectbox(key="lang").value == "zh" and at.sidebar.header[0].value == "文本"
    assert at.query_params["layer"] == "1"


def test_an_unknown_lang_falls_back_to_english():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params["lang"] = "<script>"
    at.run()
    assert not at.exception and at.selectbox(key="lang").value == "en" and at.query_params["lang"] == "en"


@pytest.mark.parametrize(
    ("page", "method"),
    [("heads", "run"), ("walkthrough", "attention_layer"), ("head_roles", "run"), ("masks", "states_under_mask")],
)
def test_a_language_switch_reruns_no_model_and_no_capture(monkeypatch, page, method):
    """The library's results hold messages, not words: the cache keys carry no language, so switching it only
    renders the same results again in the other language."""
    from attnviz.app.loading import result_cache
    from attnviz.models.embedded.model import EmbeddedModel

    calls = []
    real = getattr(EmbeddedModel, method)

    def counted(self, *args, **kwargs):
        calls.append(args[:1])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(EmbeddedModel, method, counted)
    result_cache().clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.session_state["causal"] = True
    at.run()
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception and calls, f"the {page} page never called {method}"
    before, english = len(calls), [h.value for h in at.subheader]
    at.selectbox(key="lang").set_value("zh").run()
    set_language("zh")
    assert not at.exception and [h.value for h in at.subheader] != english  # the words changed
    assert len(calls) == before, f"switching the language ran {method} again on the {page} page"

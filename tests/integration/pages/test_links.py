"""Shareable links: ?text=&model= and the page's ?layer=&head= restore the view; bad values are ignored."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from attnviz import settings
from attnviz.models.registry import EMBEDDED
from tests.plotly_json import spec_of

ROOT = Path(__file__).resolve().parents[3]
TEXT = "A dog ran to the park, and <b>it</b> was **happy**."


def open_link(page: str, **query) -> AppTest:
    """A new session opening a link: the query parameters are there before its first run."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for name, value in query.items():
        at.query_params[name] = value
    at.switch_page(page)
    return at.run()


def test_a_link_restores_text_model_layer_and_head_on_the_heads_page():
    at = open_link("pages/heads.py", text=TEXT, model="minilm", layer="2", head="3")
    assert not at.exception
    assert at.text_area(key="text").value == TEXT  # the text is data: it fills the box, unrendered
    assert at.selectbox(key="model").value == "minilm"
    assert (at.selectbox(key="heads_layer").value, at.selectbox(key="heads_head").value) == (2, 3)
    large = spec_of(at.get("plotly_chart")[0])  # the large view (the grid is the page's own canvas)
    assert large["layout"]["title"]["text"].startswith("L2 H3")
    assert "dog" in " ".join(large["data"][0]["y"])  # drawn from the link's text
    assert all("<b>" not in c.value for c in [*at.caption, *at.markdown])  # the text is never read as markup
    assert at.query_params["model"] == "minilm" and at.query_params["text"] == TEXT


def test_the_link_follows_the_sidebar_and_leaves_out_defaults_and_long_texts():
    at = open_link("pages/overview.py")
    assert not at.exception
    assert "text" not in at.query_params and "model" not in at.query_params  # the defaults need no link
    at.text_area(key="text").set_value("Short and shareable.").run()
    at.number_input(key="n_head").set_value(8).run()
    assert at.query_params["text"] == "Short and shareable." and at.query_params["n_head"] == "8"
    long_text = "word " * 120  # 600 characters
    at.text_area(key="text").set_value(long_text).run()
    assert not at.exception
    assert "text" not in at.query_params
    assert any("does not carry the text" in c.value for c in at.sidebar.caption)
    again = open_link("pages/heads.py", text="Short and shareable.", n_head="8")
    assert again.number_input(key="n_head").value == 8
    assert len(again.selectbox(key="heads_head").options) == 9  # 8 heads and the mean


def test_untrusted_link_values_are_ignored_with_a_caption():
    at = open_link("pages/heads.py", text="x" * 501, model="../../etc/passwd", n_head="100000", causal="yes", layer="1")
    assert not at.exception
    assert at.text_area(key="text").value == settings.DEFAULT_TEXT
    assert at.selectbox(key="model").value == EMBEDDED
    assert at.number_input(key="n_head").value == settings.N_HEAD.default
    assert at.checkbox(key="causal").value is False
    ignored = [c.value for c in at.sidebar.caption if "ignored" in c.value]
    assert ignored == ["The link's text, model, n_head, causal could not be used here and was ignored."]
    assert at.selectbox(key="heads_layer").value == 1  # the valid part of the link still opens
    assert "model" not in at.query_params  # the link now says what the page shows


def test_the_walkthrough_and_token_view_keep_their_layer_and_head_in_the_link():
    at = open_link("pages/walkthrough.py", layer="1", head="3")
    assert not at.exception
    assert (at.selectbox(key="walk_layer").value, at.selectbox(key="walk_head").value) == (1, 3)
    at.selectbox(key="walk_head").set_value(2).run()
    assert at.query_params["head"] == "2"
    at = open_link("pages/tokens.py", layer="1", head="mean")
    assert not at.exception
    assert (at.selectbox(key="tokens_layer").value, at.selectbox(key="tokens_head").value) == (1, "mean")
    at = open_link("pages/tokens.py", layer="9", head="<b>")
    assert not at.exception and at.selectbox(key="tokens_layer").value == 0
    assert [c.value for c in at.caption if "not one this page offers" in c.value] == [
        "The link's layer is not one this page offers: ignored.",
        "The link's head is not one this page offers: ignored.",
    ]

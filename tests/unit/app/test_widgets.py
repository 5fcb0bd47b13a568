"""What the library says reaches the page in the reader's words, and its data never as Markdown."""

import pandas as pd
from streamlit.testing.v1 import AppTest

from attnviz.app.widgets import in_words
from attnviz.i18n.message import msg
from attnviz.i18n.translate import set_language

TYPED = "**bold** [link](http://x) :red[x]"


def test_a_library_table_is_shown_with_its_headers_and_messages_in_the_readers_words():
    table = pd.DataFrame({"bug": [msg("mask_gallery.inverted.title")], "nan": [2], "kind": ["future_leak"]})
    headers = {"bug": "mask_gallery.col_bug", "nan": "mask_gallery.col_nan"}
    try:
        set_language("zh")
        shown = in_words(table, headers)
        assert list(shown.columns) == [
            msg("mask_gallery.col_bug").render("zh"),
            msg("mask_gallery.col_nan").render("zh"),
            "kind",
        ]
        assert shown.iloc[0, 0] == msg("mask_gallery.inverted.title").render("zh") and shown.iloc[0, 2] == "future_leak"
    finally:
        set_language("en")
    assert isinstance(table.iloc[0, 0], type(msg("mask_gallery.inverted.title")))  # the library's table is untouched


def errors_script():
    from attnviz.app.widgets import show_error, show_info
    from attnviz.errors import ModelUnavailableError
    from attnviz.i18n.message import msg

    typed = "**bold** [link](http://x) :red[x]"
    show_error(ModelUnavailableError(msg("mask_io.no_file", name=typed)))
    show_error(OSError(typed))
    show_info(msg("walkthrough.unsupported", error=ValueError(typed)))


def test_an_error_box_shows_the_users_text_as_typed_and_keeps_the_catalogues_markdown():
    at = AppTest.from_function(errors_script).run()
    assert not at.exception and len(at.error) == 2 and len(at.info) == 1
    for box in (*at.error, *at.info):
        assert "\\*\\*bold\\*\\*" in box.value and "\\[link\\]" in box.value and "**bold**" not in box.value

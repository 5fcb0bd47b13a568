"""Every tour test leaves the test thread in English: ``tour_app`` sets the reader's language in this thread (AppTest
formats widget options in it), and a later test in the same worker must not read Chinese where it drew English."""

import pytest

from attnviz.i18n.translate import set_language


@pytest.fixture(autouse=True)
def _english_after():
    yield
    set_language("en")

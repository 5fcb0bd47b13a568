"""Messages a learner reads say what happened in plain words, not in attnviz's internal terms (issue 37:
"its records keep no value norms (the eager route sees no values…)")."""

import pytest

from attnviz.i18n.catalogue import catalogue

JARGON = {
    "en": ("eager", "route", "data flow", "records keep", "norms"),
    "zh": ("eager", "路线", "数据流", "记录", "范数"),
}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_why_value_weighting_is_missing_is_said_in_plain_words(lang):
    text = catalogue(lang)["value_weighted.unavailable"]
    assert not [word for word in JARGON[lang] if word in text], text
    assert ("raw weights" if lang == "en" else "原始权重") in text  # and what the reader still has

"""The embedded tokenizer on English, Chinese, emoji, mixed and empty text."""

import pytest

from attnviz.core.tokenizer import tokenize


def texts(text):
    return [t.text for t in tokenize(text)]


def test_english_words_and_punctuation():
    assert texts("Hello, world! Don't stop.") == ["Hello", ",", "world", "!", "Don't", "stop", "."]


def test_chinese_one_token_per_character():
    assert texts("我爱你，中国。") == ["我", "爱", "你", "，", "中", "国", "。"]


def test_emoji_clusters_stay_whole():
    assert texts("👍🏽 👨‍👩‍👧 🇫🇷 ❤️") == ["👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️"]


def test_mixed_text():
    assert texts("Attention注意力 is 👍!") == ["Attention", "注", "意", "力", "is", "👍", "!"]


@pytest.mark.parametrize("text", ["", "   ", "\n\t "])
def test_empty_and_whitespace(text):
    assert tokenize(text) == []


@pytest.mark.parametrize("text", ["café naïve x_y 3.14", "Attention 注意力 👍🏽!", "e\u0301te\u0301 한국어 ｆｕｌｌ"])
def test_spans_point_back_into_the_text(text):
    tokens = tokenize(text)
    assert all(text[t.start : t.end] == t.text for t in tokens)
    # nothing but whitespace is dropped
    assert "".join(t.text for t in tokens) == "".join(text.split())


def test_user_text_is_escaped_for_markdown_and_plotly():
    from attnviz.core.token_display import markdown_text, plain_text

    assert markdown_text("__init__ *x* $a$ [l](u)") == r"\_\_init\_\_ \*x\* \$a\$ \[l\]\(u\)"
    assert markdown_text("猫 cat") == "猫 cat"
    assert plain_text("<b>bold</b> & 1<2") == "&lt;b&gt;bold&lt;/b&gt; &amp; 1&lt;2"

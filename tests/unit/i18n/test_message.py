"""Messages: a key and its values, rendered only when shown, in any language; str() is English (the CLI's)."""

import pickle

import pytest

from attnviz.core.token_display import markdown_text
from attnviz.errors import ModelUnavailableError
from attnviz.i18n.message import Message, PluralS, carried, concat, join, msg, render


def test_a_message_is_english_by_str_and_chinese_when_rendered_so():
    m = msg("sidebar.running_on", device="cpu")
    assert m == Message("sidebar.running_on", (("device", "cpu"),)) and m.values == {"device": "cpu"}
    assert str(m) == "Running on **cpu**"
    assert m.render("zh") == "运行于 **cpu**"


def test_an_unknown_key_fails_when_the_message_is_made_not_when_it_is_shown():
    with pytest.raises(KeyError):
        msg("no.such.key")


def test_a_message_is_hashable_and_pickles_so_caches_can_hold_it():
    m = msg("mask_build.sliding", window=4)
    assert hash(m) == hash(msg("mask_build.sliding", window=4)) and {m: 1}[msg("mask_build.sliding", window=4)] == 1
    assert pickle.loads(pickle.dumps(m)) == m


def test_values_keep_their_format_and_messages_inside_render_in_the_same_language():
    m = msg("kv_ui.config_error", error=msg("mask_build.sliding", window=4))
    assert str(m) == "This config cannot be used: causal, sliding window of 4"
    assert m.render("zh").endswith("因果掩码，滑动窗口 4")
    assert str(msg("kv_report.longest", n=12345)) == "12,345 tokens"  # "{n:,}" still formats the number


def test_an_exception_that_carries_a_message_renders_it_and_a_foreign_one_says_its_own_words():
    err = ModelUnavailableError(msg("mask_build.causal"))
    assert carried(err) == msg("mask_build.causal") and str(err) == "causal" and render(err, "zh") == "因果掩码"
    foreign = OSError("disk full")
    assert carried(foreign) is None and render(foreign, "zh") == "disk full"
    wrapped = msg("kv_ui.config_error", error=err)
    assert wrapped.render("zh").endswith("因果掩码")


def test_joined_and_concatenated_texts_render_each_part_in_one_language():
    parts = join([msg("mask_build.causal"), "L2", msg("mask_build.custom")], "; ")
    assert str(parts) == "causal; L2; custom" and parts.render("zh") == "因果掩码; L2; 自定义"
    assert str(concat("# ", msg("mask_build.causal"), "")) == "# causal"
    assert str(join([], ", ")) == ""


@pytest.mark.parametrize(("n", "plural", "verb"), [(0, "s", ""), (1, "", "s"), (2, "s", "")])
def test_englishs_plural_s_and_none_elsewhere(n, plural, verb):
    assert str(PluralS(n)) == plural and str(PluralS(n, singular=True)) == verb
    assert PluralS(n).render("zh") == "" and PluralS(n, singular=True).render("zh") == ""


def test_escaping_reaches_the_data_in_a_message_never_the_catalogues_words():
    typed = "**bold** [link](x) :red[x] $$\\x$$"
    m = msg("sidebar.running_on", device=typed)  # the template is "Running on **{device}**": its ** stay Markdown
    shown = m.render("en", markdown_text)
    assert shown.startswith("Running on **") and shown.endswith("**")
    assert markdown_text(typed) in shown and typed not in shown
    err = ModelUnavailableError(msg("mask_io.no_file", name=typed))  # nested: the file name is data too
    assert markdown_text(typed) in render(msg("kv_ui.config_error", error=err), "en", markdown_text)
    assert render(OSError(typed), "en", markdown_text) == markdown_text(typed)  # a foreign error's words: all data
    assert render(msg("kv_report.longest", n=3000), "en", markdown_text) == "3,000 tokens"  # numbers are not escaped

"""The reader's language: set once per run, read by ``t()`` and ``tr()``; a switch changes words, never results."""

import pytest

from attnviz.errors import ModelUnavailableError
from attnviz.i18n.message import msg
from attnviz.i18n.translate import language, language_from_locale, set_language, t, tr


@pytest.fixture
def chinese():
    set_language("zh")
    yield
    set_language("en")


def test_the_language_follows_the_session_and_falls_back_to_english():
    try:
        set_language("zh")
        assert language() == "zh" and t("sidebar.running_on", device="cpu") == "运行于 **cpu**"
        set_language("fr")  # no catalogue: English
        assert language() == "en" and t("sidebar.running_on", device="cpu") == "Running on **cpu**"
    finally:
        set_language("en")


def test_a_key_no_catalogue_has_fails_loudly():
    with pytest.raises(KeyError):
        t("no.such.key")


def test_one_message_reads_in_whichever_language_the_reader_has(chinese):
    """The library made the message once; the page says it in the reader's language, the CLI in English."""
    m = msg("mask_build.sliding", window=4)
    assert tr(m) == "因果掩码，滑动窗口 4" and str(m) == "causal, sliding window of 4"
    set_language("en")
    assert tr(m) == "causal, sliding window of 4"


def test_a_model_error_speaks_the_readers_language(tmp_path, chinese):
    """The loader's refusal of a folder (a config with no layers) carries a message: Chinese on a 中文 page, and the
    same English sentence the CLI prints by str()."""
    from attnviz.models.hf.loading import load_hf_source

    folder = tmp_path / "llama"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama", "num_hidden_layers": 0}')
    (folder / "model.safetensors").write_bytes(b"")  # never read: the config is refused first
    with pytest.raises(ModelUnavailableError) as caught:
        load_hf_source(str(folder))
    chinese_text = tr(caught.value)
    assert any("\u4e00" <= ch <= "\u9fff" for ch in chinese_text), chinese_text
    assert "num_hidden_layers = 0" in chinese_text and "llama" in chinese_text
    assert str(caught.value) == "llama's config has num_hidden_layers = 0; it must be a whole number >= 1"


def test_tr_says_anything_else_as_it_is():
    assert tr("plain words") == "plain words" and tr(3) == "3"


@pytest.mark.parametrize(
    ("locale", "lang"),
    [
        ("zh-CN", "zh"),
        ("zh-Hans-TW", "zh"),
        ("zh_TW", "zh"),
        ("ZH", "zh"),
        ("en-US", "en"),
        ("fr-FR", "en"),
        (None, "en"),
        ("", "en"),
    ],
)
def test_the_browser_locale_picks_the_language(locale, lang):
    assert language_from_locale(locale) == lang

"""The English and Chinese catalogues: the same keys, the same placeholders, and every key the code asks for."""

import ast
from pathlib import Path

import pytest

from attnviz import i18n
from attnviz.i18n import catalogue, language_from_locale, placeholders, set_language, t

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py")), *sorted((ROOT / "attnviz").glob("*.py"))]


def keys_asked_for() -> dict[str, str]:
    """Every literal key passed to ``t(...)`` in the app and the library, with where it is asked for."""
    asked = {}
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "t"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                asked[node.args[0].value] = f"{path.relative_to(ROOT)}:{node.lineno}"
    return asked


def test_both_languages_have_the_same_keys():
    en, zh = set(catalogue("en")), set(catalogue("zh"))
    assert not en - zh, f"missing in zh.toml: {sorted(en - zh)}"
    assert not zh - en, f"missing in en.toml: {sorted(zh - en)}"


def test_both_languages_fill_in_the_same_placeholders():
    en, zh = catalogue("en"), catalogue("zh")
    differ = {key: (placeholders(en[key]), placeholders(zh[key])) for key in en if key in zh}
    assert not {k: v for k, v in differ.items() if v[0] != v[1]}


def test_no_chinese_text_is_left_empty_or_in_english_where_english_has_words():
    en, zh = catalogue("en"), catalogue("zh")
    assert all(text.strip() for text in zh.values())
    # a Chinese text with no CJK character at all is a key left untranslated (a few are names: "d_model", "KV cache")
    same = [key for key in en if en[key] == zh[key] and any(ch.isalpha() for ch in en[key]) and " " in en[key]]
    assert same == ["sidebar.language"], same


def test_every_key_the_code_asks_for_exists():
    missing = {key: where for key, where in keys_asked_for().items() if key not in catalogue("en")}
    assert not missing, missing


def test_a_key_no_catalogue_has_fails_loudly():
    with pytest.raises(KeyError):
        t("no.such.key")


def test_the_language_follows_the_session_and_falls_back_to_english():
    try:
        set_language("zh")
        assert t("sidebar.running_on", device="cpu") == "运行于 **cpu**"
        set_language("fr")  # no catalogue: English
        assert i18n.language() == "en" and t("sidebar.running_on", device="cpu") == "Running on **cpu**"
    finally:
        set_language("en")


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


def test_placeholders():
    assert placeholders("{n:,} tokens in {model}") == {"n", "model"}
    assert placeholders("no braces") == set()


def test_the_chinese_explanations_use_the_tutorials_terms():
    zh = catalogue("zh")
    overview = " ".join(text for key, text in zh.items() if key.startswith("overview."))
    for term in ("查询", "键", "值"):  # Q, K, V as the tutorial names them
        assert term in overview, term
    everything = " ".join(zh.values())
    for term in ("缩放", "掩码", "KV 缓存", "注意力头"):
        assert everything.count(term) >= 3, term


def test_a_model_error_speaks_the_sessions_language(tmp_path):
    """The loader's refusal of a folder (here: a config with no layers) is Chinese in a 中文 session, and the
    same English sentence the CLI prints otherwise."""
    from attnviz.hf_source import load_hf_source
    from attnviz.source import ModelUnavailableError

    folder = tmp_path / "llama"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama", "num_hidden_layers": 0}')
    (folder / "model.safetensors").write_bytes(b"")  # never read: the config is refused first

    def refusal() -> str:
        with pytest.raises(ModelUnavailableError) as caught:
            load_hf_source(str(folder))
        return str(caught.value)

    try:
        set_language("zh")
        chinese = refusal()
        assert any("\u4e00" <= ch <= "\u9fff" for ch in chinese), chinese
        assert "num_hidden_layers = 0" in chinese and "llama" in chinese
    finally:
        set_language("en")
    assert refusal() == "llama's config has num_hidden_layers = 0; it must be a whole number >= 1"

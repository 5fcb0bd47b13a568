"""The English and Chinese catalogues: the same keys, the same placeholders, and every key the code asks for."""

import ast
from pathlib import Path

import pytest

from attnviz.i18n.catalogue import catalogue, placeholders, template

ROOT = Path(__file__).resolve().parents[3]
SOURCES = [ROOT / "app.py", *sorted((ROOT / "pages").rglob("*.py")), *sorted((ROOT / "attnviz").rglob("*.py"))]
ASKING = {"t", "msg"}  # the app's words now, and the library's message to render later


def keys_asked_for() -> dict[str, str]:
    """Every literal key passed to ``t(...)`` or ``msg(...)`` in the app and the library, with where it is asked."""
    asked = {}
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ASKING
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


@pytest.mark.slow
def test_every_key_the_code_asks_for_exists():
    asked = keys_asked_for()
    assert len(asked) > 800  # the scan reads the library's messages and the app's words, in every subpackage
    missing = {key: where for key, where in asked.items() if key not in catalogue("en")}
    assert not missing, missing


def test_a_template_falls_back_to_english_and_an_unknown_key_fails_loudly():
    assert template("nav.heads", "en") == "Heads" and template("nav.heads", "zh") == "注意力头"
    with pytest.raises(KeyError):
        template("no.such.key", "en")
    with pytest.raises(ValueError, match="no catalogue for 'fr'"):
        catalogue("fr")


def test_placeholders():
    assert placeholders("{n:,} tokens in {model}") == {"n", "model"}
    assert placeholders("no braces") == set()
    assert placeholders("weight %{{z:.5f}} of {b}") == {"b"}  # Plotly's braces are doubled, not placeholders


def test_the_chinese_explanations_use_the_tutorials_terms():
    zh = catalogue("zh")
    overview = " ".join(text for key, text in zh.items() if key.startswith("overview."))
    for term in ("查询", "键", "值"):  # Q, K, V as the tutorial names them
        assert term in overview, term
    everything = " ".join(zh.values())
    for term in ("缩放", "掩码", "KV 缓存", "注意力头"):
        assert everything.count(term) >= 3, term

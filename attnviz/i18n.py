"""English / 中文: every string the app shows, from one catalogue per language.

The catalogues are ``attnviz/locales/en.toml`` and ``attnviz/locales/zh.toml``:
TOML tables by page or area, flattened to dotted keys (``[heads] title = "Heads"``
is ``t("heads.title")``). Values are ``str.format`` templates: ``t("heads.tokens",
n=12)``. ``tests/unit/test_i18n.py`` fails when a key is missing in either
language, when their placeholders differ, or when the code asks for a key that
neither has.

The language is per session: the UI sets it at the start of every run
(:func:`set_language`), in a context variable, so library code that explains a
result (``attnviz.training``, the mask doctor …) speaks the same language without
importing streamlit. The CLI never sets it: its output is English, a contract
other programs parse.
"""

from __future__ import annotations

import contextvars
import functools
import string
import tomllib
from collections.abc import Mapping
from pathlib import Path

LOCALES = Path(__file__).with_name("locales")
LANGUAGES = {"en": "English", "zh": "中文"}
DEFAULT_LANGUAGE = "en"

_language: contextvars.ContextVar[str] = contextvars.ContextVar("attnviz_language", default=DEFAULT_LANGUAGE)


def _flatten(table: Mapping, prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for name, value in table.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{key}."))
        elif isinstance(value, str):
            flat[key] = value
        else:
            raise TypeError(f"{key}: a catalogue holds strings, not {type(value).__name__}")
    return flat


@functools.cache
def catalogue(lang: str) -> dict[str, str]:
    """Every key of ``lang``'s catalogue, flattened ("heads.title" -> "Heads")."""
    if lang not in LANGUAGES:
        raise ValueError(f"no catalogue for {lang!r}: the languages are {', '.join(LANGUAGES)}")
    with (LOCALES / f"{lang}.toml").open("rb") as file:
        return _flatten(tomllib.load(file))


def placeholders(template: str) -> set[str]:
    """The names a template fills in: ``"{n:,} tokens"`` -> {"n"}."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def set_language(lang: str) -> None:
    """Speak ``lang`` for the rest of this run (this thread's context)."""
    _language.set(lang if lang in LANGUAGES else DEFAULT_LANGUAGE)


def language() -> str:
    return _language.get()


def language_from_locale(locale: str | None) -> str:
    """The language for a browser's ``navigator.language`` ("zh-CN", "zh-Hans-TW" -> zh), else English."""
    return "zh" if (locale or "").lower().replace("_", "-").split("-")[0] == "zh" else DEFAULT_LANGUAGE


def t(key: str, /, **values) -> str:
    """The current language's text for ``key``, filled in with ``values``.

    KeyError when no catalogue has the key: a typo fails loudly in the tests, not
    as a blank label.
    """
    texts = catalogue(language())
    template = texts[key] if key in texts else catalogue(DEFAULT_LANGUAGE)[key]
    return template.format(**values) if values else template


__all__ = [
    "DEFAULT_LANGUAGE",
    "LANGUAGES",
    "catalogue",
    "language",
    "language_from_locale",
    "placeholders",
    "set_language",
    "t",
]

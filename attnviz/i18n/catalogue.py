"""One catalogue per language: ``locales/en.toml`` and ``locales/zh.toml``, flattened to dotted keys.

TOML tables by page or area (``[heads] title = "Heads"`` is the key ``"heads.title"``); values are
``str.format`` templates (``"{n:,} tokens"``). ``tests/unit/i18n/test_catalogue.py`` fails when a key is missing in
either language, when their placeholders differ, or when the code asks for a key that neither has.
"""

from __future__ import annotations

import functools
import string
import tomllib
from collections.abc import Mapping
from pathlib import Path

LOCALES = Path(__file__).with_name("locales")
LANGUAGES = {"en": "English", "zh": "中文"}
DEFAULT_LANGUAGE = "en"


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


def template(key: str, lang: str) -> str:
    """``key``'s template in ``lang``, English where ``lang`` lacks it; KeyError when no catalogue has it."""
    texts = catalogue(lang)
    return texts[key] if key in texts else catalogue(DEFAULT_LANGUAGE)[key]


__all__ = ["DEFAULT_LANGUAGE", "LANGUAGES", "catalogue", "placeholders", "template"]

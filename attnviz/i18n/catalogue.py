"""One catalogue per language: ``locales/en.toml`` and ``locales/zh.toml``, flattened to dotted keys.

A language's catalogue may go on in a folder of its name (``locales/en/ablation.toml``): one file per newer area,
read in name order after the main file; a key defined twice is an error, so no file silently overrides another.

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
    flat: dict[str, str] = {}
    for path in [LOCALES / f"{lang}.toml", *sorted((LOCALES / lang).glob("*.toml"))]:
        with path.open("rb") as file:
            more = _flatten(tomllib.load(file))
        if twice := sorted(more.keys() & flat.keys()):
            raise ValueError(f"{path.name}: keys already in {lang}'s catalogue: {', '.join(twice[:5])}")
        flat.update(more)
    return flat


def placeholders(template: str) -> set[str]:
    """The names a template fills in: ``"{n:,} tokens"`` -> {"n"}."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def template(key: str, lang: str) -> str:
    """``key``'s template in ``lang``, English where ``lang`` lacks it; KeyError when no catalogue has it."""
    texts = catalogue(lang)
    return texts[key] if key in texts else catalogue(DEFAULT_LANGUAGE)[key]


__all__ = ["DEFAULT_LANGUAGE", "LANGUAGES", "catalogue", "placeholders", "template"]

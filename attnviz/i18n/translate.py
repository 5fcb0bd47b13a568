"""The reader's language, and words in it: what the app and the figures call as they draw.

The language is per session: the app sets it at the start of every run
(:func:`set_language`), in a context variable, so the figures it builds speak
the same language without importing Streamlit. Nothing below the figures
imports this module (the import contract says so): the library returns
:class:`~attnviz.i18n.message.Message` objects, and :func:`tr` turns them into
words here, at render time. A language switch therefore changes words, never
results. The CLI never sets a language: its text and JSON stay English.
"""

from __future__ import annotations

import contextvars
from typing import Any

from attnviz.i18n.catalogue import DEFAULT_LANGUAGE, LANGUAGES
from attnviz.i18n.message import Escape, Message, render

_language: contextvars.ContextVar[str] = contextvars.ContextVar("attnviz_language", default=DEFAULT_LANGUAGE)


def set_language(lang: str) -> None:
    """Speak ``lang`` for the rest of this run (this thread's context)."""
    _language.set(lang if lang in LANGUAGES else DEFAULT_LANGUAGE)


def language() -> str:
    return _language.get()


def language_from_locale(locale: str | None) -> str:
    """The language for a browser's ``navigator.language`` ("zh-CN", "zh-Hans-TW" -> zh), else English."""
    return "zh" if (locale or "").lower().replace("_", "-").split("-")[0] == "zh" else DEFAULT_LANGUAGE


def t(key: str, /, **values: Any) -> str:
    """The reader's words for ``key``, filled in with ``values`` (messages among them rendered alike).

    KeyError when no catalogue has the key: a typo fails loudly in the tests, not as a blank label.
    """
    return Message(key, tuple(values.items())).render(language())


def tr(value: Any, escape: Escape = None) -> str:
    """Anything the library returned, as the reader's words: a message, several joined, an exception that
    carries one; anything else as ``str()``. ``escape`` makes the data in it safe (never the catalogue's words)."""
    return render(value, language(), escape)


__all__ = ["language", "language_from_locale", "set_language", "t", "tr"]

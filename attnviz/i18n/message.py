"""Messages: what the library says, as a catalogue key and its parameters, turned into words only when shown.

The library (core, models, labs) never translates. A result that explains
itself (the mask doctor's findings, the training verdicts, the walkthrough's
steps) and every error it raises carry a :class:`Message`:

    raise ValueError(msg("bounds.kv_group", n_head=9, n_kv_head=4))

so a result is the same whoever reads it, and caches need no language in their
keys. The app renders a message in the reader's language as it draws the page
(:func:`attnviz.i18n.translate.tr`); ``str()`` renders English, which is what
the command line prints and parses.

A parameter may itself be a message (or an exception that carries one): it is
rendered in the same language. :func:`join` and :func:`concat` put several
together; :class:`PluralS` is English's plural "s", which other languages drop.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnviz.i18n.catalogue import DEFAULT_LANGUAGE, template

Escape = Callable[[str], str] | None  # how data is made safe where the words land (Markdown), or None


class Text:
    """Something the app can say in any language: ``render(lang)``; ``str()`` is English.

    ``escape``, when given, is applied to the data a text carries (its string parameters, what an exception
    says), never to the catalogue's own words: a template may use Markdown, a user's path may not.
    """

    def render(self, lang: str = DEFAULT_LANGUAGE, escape: Escape = None) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.render(DEFAULT_LANGUAGE)


@dataclass(frozen=True)
class Message(Text):
    """A catalogue key and the values its template fills in; words only when rendered."""

    key: str
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def values(self) -> dict[str, Any]:
        return dict(self.params)

    def render(self, lang: str = DEFAULT_LANGUAGE, escape: Escape = None) -> str:
        text = template(self.key, lang)
        if not self.params:
            return text
        return text.format(**{name: _filled(value, lang, escape) for name, value in self.params})


@dataclass(frozen=True)
class Joined(Text):
    """Several texts one after another, with ``sep`` between them (a text too: ", " or a message)."""

    parts: tuple[Any, ...]
    sep: Any = ""

    def render(self, lang: str = DEFAULT_LANGUAGE, escape: Escape = None) -> str:
        return render(self.sep, lang, escape).join(render(part, lang, escape) for part in self.parts)


@dataclass(frozen=True)
class PluralS(Text):
    """English's plural ending for ``n`` things ("s" unless n is 1; ``singular=True`` for a verb's "s"); other
    languages have none."""

    n: int
    singular: bool = False

    def render(self, lang: str = DEFAULT_LANGUAGE, escape: Escape = None) -> str:
        if lang != "en":
            return ""
        return "s" if (self.n == 1) == self.singular else ""


def msg(key: str, /, **params: Any) -> Message:
    """The message ``key`` with ``params``; KeyError at once when no catalogue has the key (a typo fails loudly)."""
    template(key, DEFAULT_LANGUAGE)
    return Message(key, tuple(params.items()))


def join(parts, sep: Any = ", ") -> Joined:
    """``parts`` (texts, strings or numbers) with ``sep`` between them, rendered together."""
    return Joined(tuple(parts), sep)


def concat(*parts: Any) -> Joined:
    """``parts`` one after another, nothing between them ("" parts are fine)."""
    return Joined(parts, "")


def carried(err: BaseException) -> Text | None:
    """The message an exception was raised with, when it was raised with one (``ValueError(msg(...))``)."""
    return err.args[0] if len(err.args) == 1 and isinstance(err.args[0], Text) else None


def render(value: Any, lang: str = DEFAULT_LANGUAGE, escape: Escape = None) -> str:
    """Any value as words in ``lang``: a text rendered, an exception's message rendered, anything else ``str()``
    (and, with ``escape``, made safe: it is data)."""
    if isinstance(value, Text):
        return value.render(lang, escape)
    if isinstance(value, BaseException) and (text := carried(value)) is not None:
        return text.render(lang, escape)
    return escape(str(value)) if escape else str(value)


def _filled(value: Any, lang: str, escape: Escape) -> Any:
    """A parameter as the template gets it: numbers as numbers (for ``{n:,}``); anything else (a text, an
    exception, a string, a path, a shape) as words, escaped when asked: it is data."""
    if isinstance(value, numbers.Number):
        return value
    return render(value, lang, escape)


__all__ = ["Joined", "Message", "PluralS", "Text", "carried", "concat", "join", "msg", "render"]

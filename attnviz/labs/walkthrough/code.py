"""The source beside each walkthrough step: a function's whole source or lines cut from it, with where it lives and
how it relates to what the step ran (``inspect.getsource``, so the code shown is the code that ran).
"""

from __future__ import annotations

import functools
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import attnviz
from attnviz.i18n.message import Text, concat, msg

ROOT = Path(attnviz.__file__).resolve().parents[1]  # paths are shown from the folder that holds attnviz/

# How a piece of shown code relates to what the step ran.
CALLED = "called"
INNER_CALL = "inner call"
CALLED_WITHIN = "called within"
DEFINITION = "definition"


@dataclass(frozen=True)
class ShownCode:
    """Source the page shows beside a step, and how it relates to what the step ran.

    text: the function's whole source, or the lines cut from it (non-adjacent
    spans joined by a ``...`` line); lines: the file's line numbers of each span.
    """

    function: Callable = field(compare=False, repr=False)
    text: str
    lines: tuple[tuple[int, int], ...]
    path: str
    relation: str
    note: Text | str = ""

    @property
    def name(self) -> str:
        return f"{self.function.__module__}.{self.function.__qualname__}"

    def header(self) -> Text:
        """One comment line: which function, where, and how the step relates to it."""
        spans = ", ".join(f"{a}–{b}" if b > a else f"{a}" for a, b in self.lines)
        one = len(self.lines) == 1 and self.lines[0][0] == self.lines[0][1]
        where = msg("walkthrough_lib.line" if one else "walkthrough_lib.lines", spans=spans)
        relation = msg(f"walkthrough_lib.relation_{self.relation.replace(' ', '_')}")
        note = concat("; ", self.note) if self.note else ""
        return concat(f"# {self.name} ({self.path}, ", where, "): ", relation, note)


def _source_lines(fn: Callable) -> tuple[list[str], int, str]:
    """fn's source as dedented lines, the file's number of its first line, and the file relative to the project."""
    raw, first = inspect.getsourcelines(fn)
    file = Path(inspect.getsourcefile(fn) or "?").resolve()
    path = file.relative_to(ROOT).as_posix() if file.is_relative_to(ROOT) else file.name
    return textwrap.dedent("".join(raw)).splitlines(), first, path


@functools.cache
def whole(fn: Callable, relation: str = CALLED, note: Text | str = "") -> ShownCode:
    """fn's whole source: ``inspect.getsource(fn)``, dedented (a method's indentation removed)."""
    lines, first, path = _source_lines(fn)
    text = textwrap.dedent(inspect.getsource(fn))
    return ShownCode(fn, text, ((first, first + len(lines) - 1),), path, relation, note)


def _find(lines: list[str], marker: str, start: int, fn: Callable) -> int:
    for i in range(start, len(lines)):
        if lines[i].strip().startswith(marker):
            return i
    raise LookupError(
        f"{fn.__module__}.{fn.__qualname__} has no line starting {marker!r} any more; "
        "attnviz.labs.walkthrough cuts its steps from that source and must follow the change"
    )


@functools.cache
def excerpt(fn: Callable, spans: tuple[tuple[str, str], ...], relation: str, note: Text | str = "") -> ShownCode:
    """Lines of fn's source: each span runs from the first line starting with its first marker to the next
    line starting with its second, searched in order; spans that do not touch are joined by ``...``."""
    lines, first, path = _source_lines(fn)
    chosen: list[str] = []
    numbers: list[tuple[int, int]] = []
    at = 0
    for start, end in spans:
        a = _find(lines, start, at, fn)
        b = _find(lines, end, a, fn)
        if numbers and a > at:
            chosen.append(lines[a][: len(lines[a]) - len(lines[a].lstrip())] + "...")
        chosen.extend(lines[a : b + 1])
        numbers.append((first + a, first + b))
        at = b + 1
    return ShownCode(fn, textwrap.dedent("\n".join(chosen)), tuple(numbers), path, relation, note)

"""What a command prints, through one :class:`Output` so that it survives any stdout encoding."""

from __future__ import annotations

import json
import math
import sys

from attnviz import settings


def stdout_is_unicode() -> bool:
    """Whether stdout can write any character (UTF-8/16/32); ``PYTHONIOENCODING=ascii`` or a latin-1 pipe cannot."""
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "").replace("_", "")
    return encoding.startswith("utf")


class Output:
    """Everything a command prints, so that it survives any stdout encoding.

    JSON is written with ``ensure_ascii`` when stdout is not Unicode: ``\u732b`` escapes are the same JSON,
    so nothing is lost. Text that stdout cannot encode is written with backslash escapes (``\u732b``), and
    :meth:`notice` says so once on stderr.
    """

    def __init__(self) -> None:
        self.escaped = False

    def line(self, text: str = "") -> None:
        encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
        try:
            text.encode(encoding)
        except UnicodeEncodeError:
            text = text.encode(encoding, errors="backslashreplace").decode(encoding)
            self.escaped = True
        print(text)

    def json(self, value, **kwargs) -> None:
        self.line(json.dumps(value, ensure_ascii=not stdout_is_unicode(), **kwargs))

    def notice(self, command: str) -> None:
        if self.escaped:
            encoding = getattr(sys.stdout, "encoding", None)
            print(
                f"attnviz {command}: note: stdout's encoding ({encoding}) cannot show every character; "
                "those were written as \\uXXXX escapes (set PYTHONIOENCODING=utf-8 to see them)",
                file=sys.stderr,
            )


out = Output()


def json_number(value: float) -> float | None:
    """A statistic as the JSON prints it: rounded to 6 places, None for NaN (JSON has none)."""
    return None if math.isnan(value) else round(float(value), settings.STAT_DIGITS)

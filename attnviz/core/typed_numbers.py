"""Whole numbers as a person types them: ASCII digits only.

``int()`` and ``str.isdigit`` also take "٥" (an Arabic-Indic five), "²", "1_000" and "+5"; no count, length,
layer or head of attnviz does, on the command line or on a page, so every reader of one checks it here.
"""

from __future__ import annotations

import re

ASCII_DIGITS = re.compile(r"[0-9]+")
SIGNED_ASCII_DIGITS = re.compile(r"-?[0-9]+")


def ascii_digits(text: str) -> bool:
    """Whether ``text`` is one or more ASCII digits and nothing else."""
    return ASCII_DIGITS.fullmatch(text) is not None


def whole_number(text: str) -> int | None:
    """``text`` as a whole number when it is ASCII digits (spaces around allowed), else None."""
    digits = str(text).strip()
    return int(digits) if ascii_digits(digits) else None


def typed_int(text: str) -> int:
    """``text`` as an int when it is ASCII digits with at most a leading "-"; ValueError otherwise ("+5", " 5",
    "1_000", "٥", "５" and "5.0" included). A negative number is well formed: a range check says whether it fits."""
    if not isinstance(text, str) or SIGNED_ASCII_DIGITS.fullmatch(text) is None:
        raise ValueError(f"not a whole number in ASCII digits: {text!r}")
    return int(text)

"""A value read from a model by data flow (a scale applied in plain arithmetic, outside any module) and its verdict.

A pass can find such a value, find that it does not apply (a parallel block's attention output has no join of its
own to read), or fail to tell it (a soft cap, values too small beside the dtype's rounding): each reading says which,
so that what could not be read is never taken as 1.0 in silence. An analysis that needs a value refuses in one line
where its reading is not determined.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Verdict(Enum):
    FOUND = "found"
    NOT_APPLICABLE = "not applicable"  # nothing of this kind to read: the identity, 1.0, is exact
    NOT_DETERMINED = "not determined"  # there is one, and the pass could not tell it


@dataclass(frozen=True)
class Reading:
    """One value read by data flow: ``value`` where found (1.0 where not applicable, None where not determined)."""

    value: float | None
    verdict: Verdict

    def __post_init__(self) -> None:
        if (self.value is None) != (self.verdict is Verdict.NOT_DETERMINED):
            raise ValueError(f"a reading {self.verdict.value} has value {self.value!r}")

    @classmethod
    def found(cls, value: float) -> Reading:
        return cls(float(value), Verdict.FOUND)

    @classmethod
    def not_applicable(cls) -> Reading:
        return cls(1.0, Verdict.NOT_APPLICABLE)

    @classmethod
    def not_determined(cls) -> Reading:
        return cls(None, Verdict.NOT_DETERMINED)

    @property
    def determined(self) -> bool:
        return self.verdict is not Verdict.NOT_DETERMINED

    def to_json(self) -> dict:
        return {"value": self.value, "verdict": self.verdict.value}


NOT_APPLICABLE = Reading.not_applicable()  # frozen: one value serves as every default

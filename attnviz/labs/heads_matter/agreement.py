"""How well an estimate of every head agrees with the exact effects: Spearman's ρ of |effect| and the overlap of
the top k (the rankings), and the heads whose two values disagree in sign or size beyond a stated bound, each with
its reason (the estimate's own flag, or the disagreement itself)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from attnviz.core.ranking import spearman
from attnviz.i18n.message import Message, join, msg
from attnviz.labs.heads_matter.common import rounded

TOP_K = 10  # the heads the estimate's ranking is compared on, and confirmed


def by_size(values: Sequence[Sequence[float | None]], k: int | None = None) -> list[tuple[int, int, float]]:
    """A layer x head map's heads by |value|, largest first (ties: the earlier head), those without a value left
    out: [(layer, head, value)], the first ``k``."""
    found = [(layer, head, float(v)) for layer, row in enumerate(values) for head, v in enumerate(row) if v is not None]
    ranked = sorted(found, key=lambda item: (-abs(item[2]), item[0], item[1]))
    return ranked if k is None else ranked[:k]


def top_overlap(a: Sequence[float], b: Sequence[float], k: int = TOP_K) -> int:
    """How many of the k largest |a| are among the k largest |b| (ties: the earlier first)."""
    order = lambda values: sorted(range(len(values)), key=lambda i: (-abs(values[i]), i))[:k]  # noqa: E731
    return len(set(order(list(a))) & set(order(list(b))))


@dataclass(frozen=True)
class Agreement:
    """The estimate against exact effects on the same heads: Spearman's ρ of |effect| and the top-k overlap."""

    spearman: float
    overlap: int
    k: int
    n_heads: int

    def to_json(self) -> dict:
        return {"spearman": rounded(self.spearman), "top_overlap": self.overlap, "k": self.k, "n_heads": self.n_heads}


def agreement(
    estimate: Sequence[Sequence[float]], exact: Sequence[Sequence[float | None]], k: int = TOP_K
) -> Agreement:
    """How well ``estimate`` ranks the heads ``exact`` has values for (n_layer × n_head each)."""
    pairs = [
        (e, x)
        for e_row, x_row in zip(estimate, exact, strict=False)
        for e, x in zip(e_row, x_row, strict=False)
        if x is not None and not math.isnan(e)
    ]
    est, ex = [abs(e) for e, _ in pairs], [abs(x) for _, x in pairs]
    k = min(k, len(pairs))
    rho = spearman(est, ex)  # undefined where a ranking is constant: NaN here, null in the JSON
    return Agreement(math.nan if rho is None else rho, top_overlap(est, ex, k), k, len(pairs))


# A first-order estimate has no error bound of its own: what it leaves out is the second-order remainder, the
# curvature of everything after the head, which is not computed. So the bound is stated, not derived: a head's
# estimate agrees with its exact effect when it has the same sign and is within a factor of SIZE_FACTOR of it (it
# keeps the head's effect within "half to twice", the precision at which the page's maps and rankings are read).
# Heads whose estimate and exact effect are both under SIZE_FLOOR of the largest exact |effect| are not compared:
# they are blank cells on both maps' shared colour scale, and their signs are within the noise of the arithmetic.
SIZE_FACTOR = 2.0
SIZE_FLOOR = 0.05
SHOWN_HEADS = 20  # heads named in a sentence; the count says how many there are


@dataclass(frozen=True)
class HeadDisagreement:
    """One head whose estimate and exact effect disagree beyond the bound: ``kind`` "sign" (opposite signs) or
    "size" (over SIZE_FACTOR apart); ``reason`` the estimate's own flag when it has one ("saturated",
    "cancelling", "graddrop"), else ``kind``."""

    layer: int
    head: int
    estimate: float
    exact: float
    kind: str
    reason: str


@dataclass(frozen=True)
class HeadCheck:
    """The estimate against the exact effect head by head: the ``n_compared`` heads run exactly (with a value of
    each), and those of them that disagree beyond the bound (``factor``, ``floor``)."""

    disagree: tuple[HeadDisagreement, ...]
    n_compared: int
    factor: float = SIZE_FACTOR
    floor: float = SIZE_FLOOR

    def messages(self) -> list[Message]:
        """What a page says: one sentence per reason with its heads named (a sign flip the estimate did not flag
        first), or one that every head compared agrees within the bound."""
        if not self.disagree:
            return [msg("estimate_agree.agree", n=self.n_compared, factor=self.factor, floor=self.floor)]
        said = []
        for reason in ("sign", "size", "saturated", "cancelling", "graddrop"):
            heads = [d for d in self.disagree if d.reason == reason]
            if heads:
                text = _heads_text(heads)
                section = "estimate_check" if reason == "graddrop" else "estimate_agree"
                said.append(msg(f"{section}.{reason}", n=len(heads), heads=text, factor=self.factor))
        return said

    def marks(self) -> dict[tuple[int, int], str]:
        """Each disagreeing head's mark for a table: "sign" or "size"."""
        return {(d.layer, d.head): d.kind for d in self.disagree}


def head_check(
    estimate: Sequence[Sequence[float]],
    exact: Sequence[Sequence[float | None]],
    saturated: Sequence[tuple[int, int]] = (),
    cancelling: Sequence[tuple[int, int]] = (),
    factor: float = SIZE_FACTOR,
    floor: float = SIZE_FLOOR,
    graddrop: Sequence[tuple[int, int]] = (),
) -> HeadCheck:
    """The heads run exactly whose estimate (the same measure, n_layer × n_head) has the opposite sign or is over
    ``factor`` off, among those where either is at least ``floor`` × the largest exact |effect|; in layer, head
    order. A flagged head keeps its flag as the reason (saturated first, then cancelling, then graddrop)."""
    pairs = [
        (layer, head, float(e), float(x))
        for layer, (e_row, x_row) in enumerate(zip(estimate, exact, strict=False))
        for head, (e, x) in enumerate(zip(e_row, x_row, strict=False))
        if x is not None and math.isfinite(x) and math.isfinite(e)
    ]
    largest = max((abs(x) for *_, x in pairs), default=0.0)
    found = []
    for layer, head, e, x in pairs:
        if largest == 0 or max(abs(e), abs(x)) < floor * largest:
            continue
        if e * x < 0:
            kind = "sign"
        elif max(abs(e), abs(x)) > factor * min(abs(e), abs(x)):
            kind = "size"
        else:
            continue
        reason = next(
            (
                name
                for name, heads in (("saturated", saturated), ("cancelling", cancelling), ("graddrop", graddrop))
                if (layer, head) in heads
            ),
            kind,
        )
        found.append(HeadDisagreement(layer, head, e, x, kind, reason))
    return HeadCheck(tuple(found), len(pairs), factor, floor)


@dataclass(frozen=True)
class FlagHits:
    """One of the estimate's flags against the exact values: of the heads run exactly that it named, ``caught``
    the estimate got wrong (sign or over the factor) and ``right`` it got right (a head under the floor is right:
    within the noise)."""

    flag: str
    caught: int
    right: int


@dataclass(frozen=True)
class FlagReport:
    """How well the estimate's flags (saturated, cancelling, graddrop) foretold where it is wrong, against the
    exact values of ``n_compared`` heads: ``n_sign`` sign flips and ``n_size`` heads over ``factor`` off among
    them, each flag's hits, and ``missed``: the wrong heads that no flag named."""

    n_compared: int
    n_sign: int
    n_size: int
    hits: tuple[FlagHits, ...]
    missed: int
    factor: float = SIZE_FACTOR
    floor: float = SIZE_FLOOR

    @property
    def n_wrong(self) -> int:
        return self.n_sign + self.n_size

    def message(self) -> Message:
        """One sentence: how many heads are wrong, and what each flag caught and flagged in vain."""
        per_flag = join(
            msg(f"estimate_check.hits_{h.flag}", caught=h.caught, right=h.right, n=self.n_wrong) for h in self.hits
        )
        return msg(
            "estimate_check.flag_report",
            n=self.n_compared,
            wrong=self.n_wrong,
            sign=self.n_sign,
            size=self.n_size,
            factor=self.factor,
            floor=self.floor,
            hits=per_flag,
            missed=self.missed,
        )

    def to_json(self) -> dict:
        return {
            "compared": self.n_compared,
            "sign": self.n_sign,
            "size": self.n_size,
            "missed": self.missed,
            "flags": {h.flag: {"caught": h.caught, "right": h.right} for h in self.hits},
        }


def flag_report(
    estimate: Sequence[Sequence[float]],
    exact: Sequence[Sequence[float | None]],
    flags: Mapping[str, Sequence[tuple[int, int]]],
    factor: float = SIZE_FACTOR,
    floor: float = SIZE_FLOOR,
) -> FlagReport:
    """Each flag in ``flags`` ({name: heads}) against the heads :func:`head_check` finds wrong, among the heads
    ``exact`` has a value for (the same measure as ``estimate``)."""
    wrong = {(d.layer, d.head): d.kind for d in head_check(estimate, exact, factor=factor, floor=floor).disagree}
    compared = {
        (layer, head)
        for layer, (e_row, x_row) in enumerate(zip(estimate, exact, strict=False))
        for head, (e, x) in enumerate(zip(e_row, x_row, strict=False))
        if x is not None and math.isfinite(x) and math.isfinite(e)
    }
    hits = []
    named: set[tuple[int, int]] = set()
    for name, heads in flags.items():
        flagged = set(heads) & compared
        named |= flagged
        hits.append(FlagHits(name, len(flagged & wrong.keys()), len(flagged - wrong.keys())))
    kinds = list(wrong.values())
    return FlagReport(
        len(compared), kinds.count("sign"), kinds.count("size"), tuple(hits), len(wrong.keys() - named), factor, floor
    )


def _heads_text(found: Sequence[HeadDisagreement]) -> str:
    """Heads with their two values, "3.1 (-0.12 / +0.056)": the estimate, then the exact effect (3 digits each)."""
    shown = ", ".join(f"{d.layer}.{d.head} ({d.estimate:+.3g} / {d.exact:+.3g})" for d in found[:SHOWN_HEADS])
    return shown + (" …" if len(found) > SHOWN_HEADS else "")

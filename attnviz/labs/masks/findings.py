"""What the mask doctor found, and how each finding is told: a :class:`Problem` per kind, in a :class:`Diagnosis`.

A problem is counted in cells or in rows, keeps up to ``settings.MASK_MAX_EXAMPLES`` ``[q, k]`` examples (row and
column of the mask as given) and the offending cells (for drawing), and says what is wrong in one sentence with a
fix, naming each query by its position in the text (a step's row i is position offset + i). :class:`Finder`
collects them for :func:`attnviz.labs.masks.doctor.diagnose`; :meth:`Diagnosis.to_json` is the ``mask-doctor
--json`` contract.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

from attnviz import settings
from attnviz.i18n.message import PluralS, Text, concat, msg

PROBLEM_KINDS = (
    "future_leak",
    "cross_document",
    "fully_masked_row",
    "attends_padding",
    "inverted",
    "bad_shape",
    "missing_self",
    "over_masked",
    "under_masked",
)


@dataclass(frozen=True, eq=False)
class Problem:
    """One kind of problem in a mask.

    count: offending cells (rows for fully_masked_row and missing_self, 1 for bad_shape, inverted: cells read wrong).
    examples: up to ten [q, k] (k = -1 for a row with no key); batch_examples: the sequence of each example.
    cells: bool, the shape of ``Diagnosis.keep`` (after a bad shape: the mask's, all False), True on the offending
    cells (for drawing).
    message: one sentence with the numbers and a fix.
    extra: more JSON for this kind (cross_document: ``documents``, the [query's, key's] document of each example;
    bad_shape: ``reason``, one of :data:`SHAPE_REASONS`, and ``detail``, the message in English).
    """

    kind: str
    count: int
    examples: list[list[int]]
    cells: Tensor
    message: Text
    batch_examples: list[int] = field(default_factory=list)
    extra: dict = field(default_factory=dict)


# why a mask's shape fits no reading (bad_shape's JSON "reason"; "detail" says it in a sentence)
SHAPE_REASONS = ("broadcast_axis", "sequences", "short", "more_queries", "q_len", "offset", "documents_total")


@dataclass(frozen=True, eq=False)
class Diagnosis:
    """What :func:`diagnose` found.

    shape: the mask's shape as given. keep: the mask as read, True = may attend, (q_len, k_len) or
    (B, q_len, k_len) (a (..., 1, T) key mask expanded to (..., T, T)); None after a bad shape. expected: the keep
    mask of the expectation. offset: where the query rows sit (query i at key position offset + i) when the mask
    was read as rows of queries at an offset (rectangular, or q_len / offset given); None for a square mask read
    as a whole sequence. documents: the packed documents' lengths of a ``documents`` expectation.
    """

    convention: str
    convention_reason: Text
    shape: tuple[int, ...]
    problems: list[Problem]
    notes: list[Text]
    keep: Tensor | None = None
    expected: Tensor | None = None
    offset: int | None = None
    documents: list[int] | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        """The ``mask-doctor --json`` object: ok, convention, shape, problems (kind, count, examples, and
        ``documents`` for cross_document); ``offset`` for a decode step or chunk, ``documents`` when expected."""
        out = {
            "ok": self.ok,
            "convention": self.convention,
            "shape": list(self.shape),
            "problems": [{"kind": p.kind, "count": p.count, "examples": p.examples, **p.extra} for p in self.problems],
        }
        if self.offset is not None:
            out["offset"] = self.offset
        if self.documents is not None:
            out["documents"] = list(self.documents)
        return out


def first_cells(cells: Tensor, limit: int) -> list[tuple[int, int, int]]:
    """The first ``limit`` (b, q, k) of bool cells (B, Q, K), without listing every True cell."""
    found: list[tuple[int, int, int]] = []
    for b, q in cells.any(dim=-1).nonzero().tolist():  # (rows, 2): at most B × Q
        for k in cells[b, q].nonzero()[: limit - len(found), 0].tolist():
            found.append((b, q, k))
        if len(found) >= limit:
            break
    return found


def _at(b: int, q: int, k: int | None, batched: bool) -> Text:
    where = msg("mask_doctor.at_sequence", b=b) if batched else ""
    return concat(
        msg("mask_doctor.at_query", where=where, q=q), msg("mask_doctor.at_key", k=k) if k is not None else ""
    )


def _rows_text(rows: Tensor, batched: bool, offset: int = 0, positions: bool = False, limit: int = 6) -> Text:
    """The True rows of a bool (B, Q), named by the query's position (row q sits at offset + q): "row 0",
    "rows 0, 3", "sequence:row 0:4, 1:3"; "positions 5, 6" for a step's rows (``positions``)."""
    found = rows.nonzero().tolist()
    parts = [f"{b}:{q + offset}" if batched else str(q + offset) for b, q in found[:limit]]
    more = msg("mask_doctor.and_more", n=len(found) - limit) if len(found) > limit else ""
    plural = "s" * (len(found) > 1)
    if batched:
        label = msg("mask_doctor.label_sequence_row")
    elif positions:
        label = msg(f"mask_decode.label_position{plural}")
    else:
        label = msg(f"mask_doctor.label_row{plural}")
    return concat(label, ", ".join(parts), more)


class Finder:
    """Collects the problems of one mask; cells are (B, Q, K), rows (B, Q).

    A problem's message is its catalogue key, filled in with ``{n}`` (the count),
    ``{s}`` (a plural s), ``{ex}`` (the first example cell), ``{rows}`` (the rows,
    for row problems) and any ``fields`` given. ``offset``: row i is the query at position offset + i, its own
    key column offset + i; the messages name queries by their position (the examples stay the mask's [row,
    column]); ``positions``: the rows are a step's, named "positions" rather than "rows".
    """

    def __init__(self, batched: bool, offset: int = 0, positions: bool = False) -> None:
        self.batched = batched
        self.offset = offset
        self.positions = positions
        self.problems: dict[str, Problem] = {}

    def shaped(self, cells: Tensor) -> Tensor:
        """(B, ...) back to the mask's own rank: a (Q, K) mask gets (Q, K) cells."""
        return cells if self.batched else cells[0]

    def add_cells(self, kind: str, cells: Tensor, key: str, extra=None, **fields) -> None:
        """A problem counted in cells; ``extra(found)`` gives more fields and JSON from the (b, q, k) examples."""
        n = int(cells.sum())
        if n == 0:
            return
        found = first_cells(cells, settings.MASK_MAX_EXAMPLES)
        more_fields, more_json = extra(found) if extra is not None else ({}, {})
        b, q, k = found[0]
        ex = _at(b, q + self.offset, k, self.batched)
        text = msg(key, n=f"{n:,}", s=PluralS(n), ex=ex, **fields, **more_fields)
        examples = [[q, k] for _, q, k in found]
        batch = [b for b, _, _ in found]
        self.problems[kind] = Problem(kind, n, examples, self.shaped(cells), text, batch, more_json)

    def add_rows(self, kind: str, rows: Tensor, cells: Tensor, key: str, self_key: bool, **fields) -> None:
        """A problem counted in rows; its examples are [q, own key] (self_key) or [q, -1] (no key)."""
        n = int(rows.sum())
        if n == 0:
            return
        found = rows.nonzero()[: settings.MASK_MAX_EXAMPLES].tolist()
        shown = _rows_text(rows, self.batched, self.offset, self.positions)
        text = msg(key, n=f"{n:,}", s=PluralS(n), rows=shown, **fields)
        examples = [[q, q + self.offset if self_key else -1] for _, q in found]
        self.problems[kind] = Problem(kind, n, examples, self.shaped(cells), text, [b for b, _ in found])

    def ordered(self) -> list[Problem]:
        return [self.problems[kind] for kind in PROBLEM_KINDS if kind in self.problems]

"""Diagnose an attention mask: find the cells that leak, the rows that go NaN, the mask read backwards.

:func:`diagnose` reads a mask in one of :data:`attnviz.labs.masks.reading.CONVENTIONS`,
compares it with what the user says it should be (an :class:`Expectation`:
causal, padding, causal + padding, a sliding window or a prefix-LM, with the
sequence lengths when batched) and returns a :class:`Diagnosis`: one
:class:`Problem` per kind found, each with its count, up to ten ``[q, k]``
examples, the offending cells (for drawing) and one sentence with a fix.

What is checked, and when:

- Always: ``fully_masked_row`` (a row that keeps no key: a plain softmax gives
  NaN; every such row is reported, padding rows included) and ``inverted`` (the
  mask is the expected one, or with no expectation a clean causal or sliding
  mask, read with the wrong convention). An inverted mask is reported alone:
  every other finding would be a consequence of it.
- With lengths: ``bad_shape`` (batch size or T do not fit the lengths; a
  ``(..., T, 1)`` mask, padding broadcast over keys instead of queries, is
  always a bad shape) and ``attends_padding`` (a real query keeps a pad key).
  A bad shape stops every other check.
- With an expectation: ``future_leak`` (a kept key after the query that the
  expectation blocks), ``under_masked`` (any other kept cell it blocks, such as
  a key older than the sliding window), ``missing_self`` (a blocked diagonal it
  keeps) and ``over_masked`` (any other blocked cell it keeps).

Without an expectation only the structural checks run: a mask with no stated
intent cannot leak or over-mask. Padding query rows are don't-care (their
output is discarded) except for ``fully_masked_row``. Each cell counts in at
most one of the cell kinds; ``fully_masked_row`` counts rows and may overlap.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from attnviz import settings
from attnviz.core.masks import causal_mask, padding_mask, sliding_window_mask
from attnviz.i18n.message import PluralS, Text, concat, msg
from attnviz.labs.masks.reading import additive_bias, infer_convention, to_keep

PROBLEM_KINDS = (
    "future_leak",
    "fully_masked_row",
    "attends_padding",
    "inverted",
    "bad_shape",
    "missing_self",
    "over_masked",
    "under_masked",
)
EXPECT_KINDS = ("causal", "padding", "causal+padding", "sliding", "prefix")
SIDES = ("right", "left")


@dataclass(frozen=True)
class Expectation:
    """What the mask should be: kind in :data:`EXPECT_KINDS`; ``window`` for sliding, ``prefix`` for prefix."""

    kind: str
    window: int | None = None
    prefix: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in EXPECT_KINDS:
            raise ValueError(msg("mask_doctor.expect_kind", kinds=", ".join(EXPECT_KINDS), kind=repr(self.kind)))
        if (self.window is not None) != (self.kind == "sliding"):
            raise ValueError(msg("mask_doctor.window_with_sliding"))
        if (self.prefix is not None) != (self.kind == "prefix"):
            raise ValueError(msg("mask_doctor.prefix_with_prefix"))
        if self.window is not None and self.window < 1:
            raise ValueError(msg("mask_doctor.window_positive", window=self.window))
        if self.prefix is not None and self.prefix < 0:
            raise ValueError(msg("mask_doctor.prefix_positive", prefix=self.prefix))

    @property
    def causal(self) -> bool:
        """Whether keys after the query are blocked (outside a prefix-LM's prefix)."""
        return self.kind != "padding"

    @property
    def needs_lengths(self) -> bool:
        return self.kind in ("padding", "causal+padding")

    def describe(self) -> Text:
        """A name for messages: "causal", "sliding-window (4)", "prefix-LM (prefix 3)"."""
        if self.kind == "sliding":
            return msg("mask_doctor.describe_sliding", window=self.window)
        if self.kind == "prefix":
            return msg("mask_doctor.describe_prefix", prefix=self.prefix)
        return msg(f"mask_doctor.describe_{self.kind.replace('+', '_')}")

    def __str__(self) -> str:
        if self.kind == "sliding":
            return f"sliding:{self.window}"
        if self.kind == "prefix":
            return f"prefix:{self.prefix}"
        return self.kind


def parse_expect(text: str) -> Expectation:
    """``causal``, ``padding``, ``causal+padding``, ``sliding:W`` or ``prefix:P`` as an Expectation; ValueError else."""
    usage = msg("mask_doctor.usage")
    kind, _, number = str(text).strip().lower().partition(":")
    kind = {"padding+causal": "causal+padding"}.get(kind, kind)
    if kind in ("sliding", "prefix"):
        try:
            value = int(number)
        except ValueError:
            raise ValueError(msg("mask_doctor.expect_number", text=repr(text), kind=kind)) from None
        return Expectation(kind, window=value) if kind == "sliding" else Expectation(kind, prefix=value)
    if kind not in EXPECT_KINDS or number:
        raise ValueError(msg("mask_doctor.expect_unknown", text=repr(text), usage=usage))
    return Expectation(kind)


def parse_lengths(text: str, what: str = "--lengths") -> list[int]:
    """``"5,3"`` as [5, 3]: each sequence's (or document's) length, at least 1; ValueError naming ``what``."""
    try:
        lengths = [int(part) for part in str(text).split(",")]
    except ValueError:
        raise ValueError(msg("mask_doctor.lengths_numbers", what=what, text=repr(text))) from None
    if any(n < 1 for n in lengths):
        raise ValueError(msg("mask_doctor.lengths_positive", what=what, text=repr(text)))
    return lengths


def _real_tokens(lengths: list[int] | None, batch: int, seq_len: int, side: str) -> Tensor:
    """True on real (non-pad) positions: (batch, seq_len)."""
    if lengths is None:
        return torch.ones(batch, seq_len, dtype=torch.bool)
    return padding_mask(lengths, seq_len, side=side)[:, 0, 0]  # (batch, seq_len)


def expected_keep(
    expect: Expectation,
    seq_len: int,
    *,
    batch: int | None = None,
    lengths: list[int] | None = None,
    side: str = "right",
) -> Tensor:
    """The keep mask (True = may attend) the expectation describes: (T, T), or (B, T, T) with batch or lengths.

    T is ``seq_len``, the padded length.

    Each sequence's rule applies to its own positions (a left-padded sequence's
    prefix and window start at its first real token) and no query keeps a pad
    key. A padding query row keeps what the rule gives it among the real keys,
    or only itself when that is nothing, so no row is ever fully masked.
    """
    if side not in SIDES:
        raise ValueError(msg("mask_doctor.side", side=repr(side)))
    n_seq = len(lengths) if lengths is not None else (batch or 1)
    if batch is not None and batch != n_seq:
        raise ValueError(f"batch ({batch}) and the number of lengths ({n_seq}) differ")
    T = seq_len
    real = _real_tokens(lengths, n_seq, T, side)  # (B, T)
    first = torch.tensor([T - n for n in lengths] if lengths is not None and side == "left" else [0] * n_seq)  # (B,)
    pos = torch.arange(T)[None, :] - first[:, None]  # (B, T): position within the sequence
    q, k = pos[:, :, None], pos[:, None, :]  # (B, T, 1), (B, 1, T)
    rule = torch.ones(n_seq, T, T, dtype=torch.bool) if expect.kind == "padding" else k <= q  # (B, T, T)
    if expect.kind == "sliding":
        rule = rule & (q - k < expect.window)
    if expect.kind == "prefix":
        rule = rule | ((q < expect.prefix) & (k < expect.prefix))
    keep = rule & real[:, None, :]  # (B, T, T)
    keep = keep | (~keep.any(dim=-1, keepdim=True) & torch.eye(T, dtype=torch.bool))
    return keep[0] if batch is None and lengths is None else keep


@dataclass(frozen=True, eq=False)
class Problem:
    """One kind of problem in a mask.

    count: offending cells (rows for fully_masked_row and missing_self, 1 for bad_shape, inverted: cells read wrong).
    examples: up to ten [q, k] (k = -1 for a row with no key); batch_examples: the sequence of each example.
    cells: bool, the shape of ``Diagnosis.keep`` (after a bad shape: the mask's, all False), True on the offending
    cells (for drawing).
    message: one sentence with the numbers and a fix.
    """

    kind: str
    count: int
    examples: list[list[int]]
    cells: Tensor
    message: Text
    batch_examples: list[int] = field(default_factory=list)


@dataclass(frozen=True, eq=False)
class Diagnosis:
    """What :func:`diagnose` found.

    shape: the mask's shape as given. keep: the mask as read, True = may attend, (T, T) or (B, T, T)
    (a (..., 1, T) key mask expanded); None after a bad shape. expected: the keep mask of the expectation.
    """

    convention: str
    convention_reason: Text
    shape: tuple[int, ...]
    problems: list[Problem]
    notes: list[Text]
    keep: Tensor | None = None
    expected: Tensor | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        """The ``mask-doctor --json`` object: ok, convention, shape, problems (kind, count, examples)."""
        return {
            "ok": self.ok,
            "convention": self.convention,
            "shape": list(self.shape),
            "problems": [{"kind": p.kind, "count": p.count, "examples": p.examples} for p in self.problems],
        }


def _examples(cells: Tensor, limit: int) -> list[tuple[int, int, int]]:
    """The first ``limit`` (b, q, k) of bool cells (B, T, T), without listing every True cell."""
    found: list[tuple[int, int, int]] = []
    for b, q in cells.any(dim=-1).nonzero().tolist():  # (rows, 2): at most B × T
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


def _rows_text(rows: Tensor, batched: bool, limit: int = 6) -> Text:
    """The True rows of a bool (B, T): "row 0", "rows 0, 3", "sequence:row 0:4, 1:3"."""
    found = rows.nonzero().tolist()
    parts = [f"{b}:{q}" if batched else str(q) for b, q in found[:limit]]
    more = msg("mask_doctor.and_more", n=len(found) - limit) if len(found) > limit else ""
    label = msg("mask_doctor.label_sequence_row") if batched else msg(f"mask_doctor.label_row{'s' * (len(found) > 1)}")
    return concat(label, ", ".join(parts), more)


class _Finder:
    """Collects the problems of one mask; cells are (B, T, T), rows (B, T).

    A problem's message is its catalogue key, filled in with ``{n}`` (the count),
    ``{s}`` (a plural s), ``{ex}`` (the first example cell), ``{rows}`` (the rows,
    for row problems) and any ``fields`` given.
    """

    def __init__(self, batched: bool) -> None:
        self.batched = batched
        self.problems: dict[str, Problem] = {}

    def shaped(self, cells: Tensor) -> Tensor:
        """(B, ...) back to the mask's own rank: a (T, T) mask gets (T, T) cells."""
        return cells if self.batched else cells[0]

    def add_cells(self, kind: str, cells: Tensor, key: str, **fields) -> None:
        n = int(cells.sum())
        if n == 0:
            return
        found = _examples(cells, settings.MASK_MAX_EXAMPLES)
        b, q, k = found[0]
        text = msg(key, n=f"{n:,}", s=PluralS(n), ex=_at(b, q, k, self.batched), **fields)
        examples = [[q, k] for _, q, k in found]
        self.problems[kind] = Problem(kind, n, examples, self.shaped(cells), text, [b for b, _, _ in found])

    def add_rows(self, kind: str, rows: Tensor, cells: Tensor, key: str, self_key: bool, **fields) -> None:
        """A problem counted in rows; its examples are [q, q] (self_key) or [q, -1] (no key)."""
        n = int(rows.sum())
        if n == 0:
            return
        found = rows.nonzero()[: settings.MASK_MAX_EXAMPLES].tolist()
        text = msg(key, n=f"{n:,}", s=PluralS(n), rows=_rows_text(rows, self.batched), **fields)
        examples = [[q, q if self_key else -1] for _, q in found]
        self.problems[kind] = Problem(kind, n, examples, self.shaped(cells), text, [b for b, _ in found])

    def ordered(self) -> list[Problem]:
        return [self.problems[kind] for kind in PROBLEM_KINDS if kind in self.problems]


def _convention(mask: Tensor, convention: str | None) -> tuple[str, Text]:
    if mask.dtype.is_floating_point:
        if convention not in (None, "additive"):
            raise ValueError(msg("mask_doctor.float_is_additive"))
        return infer_convention(mask)
    if mask.dtype != torch.bool:
        raise ValueError(msg("mask_doctor.bool_or_float", dtype=mask.dtype))
    if convention is None:
        return infer_convention(mask)
    if convention not in ("keep", "block"):
        raise ValueError(msg("mask_doctor.keep_or_block", convention=repr(convention)))
    meaning = msg(f"mask_doctor.meaning_{convention}")
    return convention, msg("mask_doctor.as_given", meaning=meaning, convention=convention)


def _check_lengths(lengths: list[int] | None) -> list[int] | None:
    if lengths is None:
        return None
    lengths = list(lengths)
    if not lengths or any(isinstance(n, bool) or int(n) != n or n < 1 for n in lengths):
        raise ValueError(msg("mask_doctor.lengths_whole", lengths=lengths))
    return [int(n) for n in lengths]


def _dims(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ")"


def _shape_problem(shape: tuple[int, ...], lengths: list[int] | None) -> Text | None:
    """Why the shape cannot be the mask the lengths describe, or None."""
    q_len, k_len = shape[-2:]
    n_seq = shape[0] if len(shape) == 3 else 1
    if k_len == 1 and q_len > 1:
        return msg("mask_doctor.shape_broadcast", dims=_dims(shape))
    if lengths is None:
        return None
    T = k_len
    shown = ",".join(map(str, lengths))
    if len(lengths) != n_seq:
        return msg(
            "mask_doctor.shape_sequences",
            dims=_dims(shape),
            n=n_seq,
            s=PluralS(n_seq),
            lengths=shown,
            given=len(lengths),
        )
    if max(lengths) > T:
        return msg("mask_doctor.shape_short", dims=_dims(shape), T=T, longest=max(lengths), lengths=shown)
    return None


def _reference_without_expectation(opposite: Tensor) -> tuple[Tensor, Text] | None:
    """A clean mask that ``opposite`` (B, T, T) is in every sequence: causal or a sliding window."""
    T = opposite.shape[-1]
    if T < 2:
        return None
    causal = causal_mask(T)  # (T, T)
    if bool((opposite == causal).all()):
        return causal.expand_as(opposite), msg("mask_doctor.a_causal_mask")
    window = int(opposite.sum(dim=-1).max())
    if 1 <= window < T:
        sliding = sliding_window_mask(T, window)
        if bool((opposite == sliding).all()):
            return sliding.expand_as(opposite), msg("mask_doctor.a_sliding_mask", window=window)
    return None


def _fits_side(keep: Tensor, expect: Expectation | None, lengths: list[int], side: str) -> bool:
    """Whether ``keep`` (B, T, T) is a clean mask for sequences padded on ``side``: every real row right."""
    B, T = keep.shape[:2]
    real = _real_tokens(lengths, B, T, side)  # (B, T)
    if expect is not None:
        wrong = keep != expected_keep(expect, T, batch=B, lengths=lengths, side=side)
    else:
        wrong = (keep & ~real[:, None, :]) | ~keep.any(dim=-1, keepdim=True)  # pad keys kept, or nothing kept
    return not bool((wrong & real[:, :, None]).any())


def _inverted_message(convention: str, what: Text) -> tuple[str, dict]:
    """The message key and its fields (the finder adds {n} and {s}) for a mask that is ``what`` read with the
    opposite convention."""
    if convention == "additive":
        return "mask_doctor.inverted_float", {"what": what}
    other = "block" if convention == "keep" else "keep"
    return "mask_doctor.inverted", {"what": what, "meaning": msg(f"mask_doctor.meaning_{other}"), "other": other}


def _float_notes(mask: Tensor, fully: Tensor, reference: Tensor | None, what: Text) -> list[Text]:
    """Notes on an additive mask (B, T, T): 0/1 only, bias cells, float16 -inf rows."""
    notes = []
    ones = mask == 1
    if bool(((mask == 0) | ones).all()) and bool(ones.any()):
        fix = msg("mask_doctor.zero_one_fix")
        if reference is not None and torch.equal(~ones, reference):
            fix = msg("mask_doctor.zero_one_block", what=what)
        elif reference is not None and torch.equal(ones, reference):
            fix = msg("mask_doctor.zero_one_keep", what=what)
        notes.append(msg("mask_doctor.zero_one", fix=fix))
    else:
        bias = additive_bias(mask)
        if bool(bias.any()):
            _, q, k = _examples(bias, 1)[0]
            n, low, high = int(bias.sum()), float(mask[bias].min()), float(mask[bias].max())
            values = f"{low:g}" if low == high else msg("mask_doctor.value_range", low=low, high=high)
            verb_s = PluralS(n, singular=True)
            notes.append(msg("mask_doctor.bias", n=n, s=PluralS(n), verb_s=verb_s, values=values, q=q, k=k))
    if mask.dtype == torch.float16 and bool((torch.isneginf(mask) & fully[..., None]).any()):
        notes.append(msg("mask_doctor.fp16_inf"))
    return notes


def diagnose(
    mask: Tensor,
    *,
    convention: str | None = None,
    expect: Expectation | None = None,
    lengths: list[int] | None = None,
    side: str = "right",
) -> Diagnosis:
    """Find what is wrong with ``mask``: bool or float, (T, T) or (B, T, T), or (..., 1, T) broadcast over queries.

    convention: "keep" or "block" for a bool mask (None: inferred from the
    diagonal); a float mask is additive. expect: what it should be; lengths and
    side: the real length of each sequence and where the pads go. ValueError for
    arguments that do not fit together (a float mask read as keep, padding
    without lengths); a mask that does not fit them is a ``bad_shape`` problem.
    """
    convention, reason = _convention(mask, convention)
    lengths = _check_lengths(lengths)
    if side not in SIDES:
        raise ValueError(msg("mask_doctor.side", side=repr(side)))
    if expect is not None and expect.needs_lengths and lengths is None:
        raise ValueError(msg("mask_doctor.needs_lengths", expect=expect))
    shape = tuple(mask.shape)
    if mask.ndim not in (2, 3) or 0 in shape:
        raise ValueError(msg("mask_doctor.rank", dims=_dims(shape)))
    q_len, k_len = shape[-2:]
    if q_len != k_len and 1 not in (q_len, k_len):
        raise ValueError(msg("mask_doctor.square", dims=_dims(shape)))
    batched = mask.ndim == 3
    bad = _shape_problem(shape, lengths)
    if bad is not None:
        problem = Problem("bad_shape", 1, [], torch.zeros(shape, dtype=torch.bool), bad)
        return Diagnosis(convention, reason, shape, [problem], [])
    notes = []
    m = mask if batched else mask[None]  # (B, q_len, T)
    B, T = m.shape[0], k_len
    if q_len == 1 and T > 1:
        m = m.expand(B, T, T)
        notes.append(msg("mask_doctor.key_mask", T=T))
    keep = to_keep(m, convention)  # (B, T, T)
    real = _real_tokens(lengths, B, T, side)  # (B, T)
    rows = real[:, :, None]  # (B, T, 1): the queries whose output is used
    expected = expected_keep(expect, T, batch=B, lengths=lengths, side=side) if expect is not None else None
    if expected is not None:
        reference, what = expected, msg("mask_doctor.the_expected", desc=expect.describe())
    else:
        reference, what = _reference_without_expectation(~keep) or (None, "")
    fully = ~keep.any(dim=-1)  # (B, T)
    if convention == "additive":
        notes += _float_notes(m, fully, reference, what)
    finder = _Finder(batched)

    def result() -> Diagnosis:
        shown_expected = None if expected is None else finder.shaped(expected)
        return Diagnosis(convention, reason, shape, finder.ordered(), notes, finder.shaped(keep), shown_expected)

    if reference is not None:
        wrong = (keep != reference) & rows
        if bool(wrong.any()) and not bool(((~keep != reference) & rows).any()):
            key, fields = _inverted_message(convention, what)
            finder.add_cells("inverted", wrong, key, **fields)
            return result()

    if bool(fully.any()):
        finite = convention == "additive" and not bool((torch.isneginf(m) & fully[..., None]).any())
        effect = msg("mask_doctor.effect_nan")
        if finite:
            effect = msg("mask_doctor.effect_finite")
        if lengths is not None and not bool((fully & real).any()):
            effect = concat(effect, msg("mask_doctor.effect_padding"))
        finder.add_rows(
            "fully_masked_row",
            fully,
            fully[..., None].expand(B, T, T),
            "mask_doctor.fully_masked_row",
            self_key=False,
            effect=effect,
        )
    if expected is None and lengths is None:
        return result()

    allowed = expected if expected is not None else real[:, None, :].expand(B, T, T)  # (B, T, T)
    extra = keep & ~allowed & rows  # kept cells that should be blocked
    if lengths is not None:
        padded = extra & ~real[:, None, :]  # real queries keeping pad keys
        other = "left" if side == "right" else "right"
        hint = ""
        if _fits_side(keep, expect, lengths, other):
            hint = msg("mask_doctor.side_hint", other=other)
        finder.add_cells(
            "attends_padding",
            padded,
            "mask_doctor.attends_padding",
            hint=hint,
        )
        extra = extra & ~padded
    if expected is None:
        return result()

    desc = expect.describe()
    future = extra & torch.ones(T, T, dtype=torch.bool).triu(1)  # keys after the query
    outside = msg("mask_doctor.outside_prefix") if expect.kind == "prefix" else ""
    finder.add_cells(
        "future_leak",
        future,
        "mask_doctor.future_leak",
        desc=desc,
        outside=outside,
    )
    fix = msg("mask_doctor.under_fix_sliding") if expect.kind == "sliding" else ""
    finder.add_cells(
        "under_masked",
        extra & ~future,
        "mask_doctor.under_masked",
        desc=desc,
        fix=fix or msg("mask_doctor.block_it"),
    )
    diagonal = torch.eye(T, dtype=torch.bool)
    missing = ~keep & expected & rows & diagonal  # (B, T, T)
    finder.add_rows(
        "missing_self",
        missing.any(dim=-1),
        missing,
        "mask_doctor.missing_self",
        self_key=True,
        desc=desc,
    )
    if expect.kind == "sliding":
        fix = msg("mask_doctor.over_fix_sliding", window=expect.window, before=expect.window - 1)
    elif expect.kind == "prefix":
        fix = msg("mask_doctor.over_fix_prefix", prefix=expect.prefix)
    else:
        fix = msg("mask_doctor.over_fix")
    finder.add_cells(
        "over_masked",
        ~keep & expected & rows & ~diagonal,
        "mask_doctor.over_masked",
        desc=desc,
        fix=fix,
    )
    return result()

"""Diagnose an attention mask: find the cells that leak, the rows that go NaN, the mask read backwards.

:func:`diagnose` reads a mask in one of :data:`attnviz.labs.masks.reading.CONVENTIONS`,
compares it with what the user says it should be (an :class:`Expectation`:
causal, padding, causal + padding, a sliding window, a prefix-LM or packed
documents, with the sequence lengths when batched) and returns a
:class:`Diagnosis`: one :class:`Problem` per kind found, each with its count,
up to ten ``[q, k]`` examples (row and column of the mask as given), the
offending cells (for drawing) and one sentence with a fix, which names each
query by its position in the text (a step's row i is position offset + i).

A mask is (q_len, k_len), or (B, q_len, k_len) for a batch. A square mask is a
whole sequence. A rectangular one (q_len < k_len) is a decode step or a chunk
of prefill with a KV cache: its queries are the last q_len positions, aligned
bottom-right (query i at absolute position ``offset + i``, ``offset = k_len -
q_len``: the number of cached tokens) unless ``offset`` says otherwise. A
(..., 1, T) mask is a key mask broadcast over T queries, unless ``q_len`` or
``offset`` says it is one decode step.

What is checked, and when:

- Always: ``fully_masked_row`` (a row that keeps no key: a plain softmax gives
  NaN; every such row is reported, padding rows included) and ``inverted`` (the
  mask is the expected one, or with no expectation a clean causal or sliding
  mask, read with the wrong convention). An inverted mask is reported alone:
  every other finding would be a consequence of it.
- Shape: ``bad_shape`` when no reading fits: batch size or T do not fit the
  lengths, a ``(..., T, 1)`` mask (padding broadcast over keys instead of
  queries), more queries than keys, q_len or offset that do not fit the mask,
  documents whose lengths do not add up to k_len. A bad shape stops every other
  check.
- With lengths: ``attends_padding`` (a real query keeps a pad key).
- With an expectation: ``future_leak`` (a kept key after the query that the
  expectation blocks), ``cross_document`` (with packed documents: a kept key of
  another document), ``under_masked`` (any other kept cell it blocks, such as
  a key older than the sliding window), ``missing_self`` (a blocked diagonal it
  keeps) and ``over_masked`` (any other blocked cell it keeps).

Without an expectation only the structural checks run: a mask with no stated
intent cannot leak or over-mask. Padding query rows are don't-care (their
output is discarded) except for ``fully_masked_row``. Each cell counts in at
most one of the cell kinds; ``fully_masked_row`` counts rows and may overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.core.masks import causal_mask, sliding_window_mask
from attnviz.i18n.message import PluralS, Text, concat, msg
from attnviz.labs.masks.expectations import (
    EXPECT_KINDS,
    SIDES,
    Expectation,
    document_index,
    expected_keep,
    future_cells,
    parse_expect,
    parse_lengths,
    real_tokens,
    self_cells,
)
from attnviz.labs.masks.findings import PROBLEM_KINDS, Diagnosis, Finder, Problem, first_cells
from attnviz.labs.masks.reading import additive_bias, infer_convention, to_keep

__all__ = [
    "EXPECT_KINDS",
    "PROBLEM_KINDS",
    "SIDES",
    "Diagnosis",
    "Expectation",
    "Problem",
    "diagnose",
    "expected_keep",
    "parse_expect",
    "parse_lengths",
]


def _convention(mask: Tensor, convention: str | None, offset: int = 0) -> tuple[str, Text]:
    """The convention to read ``mask`` with, and why; a bool mask's is inferred from its diagonal at ``offset``."""
    if mask.dtype.is_floating_point:
        if convention not in (None, "additive"):
            raise ValueError(msg("mask_doctor.float_is_additive"))
        return infer_convention(mask)
    if mask.dtype != torch.bool:
        raise ValueError(msg("mask_doctor.bool_or_float", dtype=mask.dtype))
    if convention is None:
        return infer_convention(mask, offset=offset)
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


def _check_count(value: int | None, name: str, least: int) -> int | None:
    """``--q-len`` (at least 1) or ``--offset`` (at least 0) as an int; ValueError naming it."""
    if value is None:
        return None
    if isinstance(value, bool) or int(value) != value or value < least:
        raise ValueError(msg("mask_decode.count", name=name, value=value, least=least))
    return int(value)


def _dims(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ")"


def _shape_problem(shape: tuple[int, ...], lengths: list[int] | None) -> tuple[str, Text] | None:
    """Why the shape cannot be the mask the lengths describe (a
    :data:`~attnviz.labs.masks.findings.SHAPE_REASONS` code and a sentence), or None."""
    q_len, k_len = shape[-2:]
    n_seq = shape[0] if len(shape) == 3 else 1
    if k_len == 1 and q_len > 1:
        return "broadcast_axis", msg("mask_doctor.shape_broadcast", dims=_dims(shape))
    if lengths is None:
        return None
    T = k_len
    shown = ",".join(map(str, lengths))
    if len(lengths) != n_seq:
        return "sequences", msg(
            "mask_doctor.shape_sequences",
            dims=_dims(shape),
            n=n_seq,
            s=PluralS(n_seq),
            lengths=shown,
            given=len(lengths),
        )
    if max(lengths) > T:
        return "short", msg("mask_doctor.shape_short", dims=_dims(shape), T=T, longest=max(lengths), lengths=shown)
    return None


@dataclass(frozen=True)
class _Reading:
    """How the rows of a mask are read: ``key_mask`` (a (..., 1, T) mask broadcast over T queries), the number
    of query rows, their offset (row i is position offset + i), whether that offset is stated (``as_rows``:
    reported), and why no reading fits (``bad``: a :data:`~attnviz.labs.masks.findings.SHAPE_REASONS` code and a
    sentence)."""

    key_mask: bool
    q_len: int
    offset: int
    as_rows: bool
    bad: tuple[str, Text] | None = None


def _reading(shape: tuple[int, ...], q_len: int | None, offset: int | None, expect: Expectation | None) -> _Reading:
    """Decide how to read a mask of ``shape`` given ``--q-len`` and ``--offset`` (None: not given)."""
    rows, k_len = shape[-2:]
    dims = _dims(shape)
    documents = None
    if expect is not None and expect.kind == "documents" and sum(expect.documents) != k_len:
        shown = ",".join(map(str, expect.documents))
        documents = (
            "documents_total",
            msg("mask_decode.shape_documents", dims=dims, documents=shown, total=sum(expect.documents), k_len=k_len),
        )
    if rows == 1 < k_len and offset is None and q_len in (None, k_len):
        return _Reading(key_mask=True, q_len=k_len, offset=0, as_rows=False, bad=documents)
    if rows > k_len:  # no offset places them; (..., T, 1) is the broadcast bug, which _shape_problem names
        more = None
        if k_len != 1:
            more = "more_queries", msg("mask_decode.shape_more_queries", dims=dims, rows=rows, k_len=k_len)
        return _Reading(key_mask=False, q_len=rows, offset=0, as_rows=False, bad=more)
    as_rows = rows != k_len or q_len is not None or offset is not None
    start = k_len - rows if offset is None else offset
    bad = documents
    if q_len is not None and q_len != rows:
        bad = "q_len", msg("mask_decode.shape_q_len", dims=dims, q_len=q_len, rows=rows, s=PluralS(rows))
    elif start + rows > k_len:
        last = start + rows - 1
        bad = "offset", msg("mask_decode.shape_offset", dims=dims, offset=start, rows=rows, last=last, k_len=k_len)
    return _Reading(key_mask=False, q_len=rows, offset=max(start, 0), as_rows=as_rows, bad=bad)


def _reference_without_expectation(opposite: Tensor, offset: int) -> tuple[Tensor, Text] | None:
    """A clean mask that ``opposite`` (B, Q, K) is in every sequence: causal or a sliding window at ``offset``."""
    Q, K = opposite.shape[-2:]
    if K < 2:
        return None
    causal = causal_mask(Q, K, offset=offset)  # (Q, K)
    if bool((opposite == causal).all()):
        return causal.expand_as(opposite), msg("mask_doctor.a_causal_mask")
    window = int(opposite.sum(dim=-1).max())
    if 1 <= window < K:
        sliding = sliding_window_mask(Q, window, k_len=K, offset=offset)
        if bool((opposite == sliding).all()):
            return sliding.expand_as(opposite), msg("mask_doctor.a_sliding_mask", window=window)
    return None


def _fits_side(keep: Tensor, expect: Expectation | None, lengths: list[int], side: str, offset: int) -> bool:
    """Whether ``keep`` (B, Q, K) is a clean mask for sequences padded on ``side``: every real row right."""
    B, Q, K = keep.shape
    real = real_tokens(lengths, B, K, side)  # (B, K)
    real_rows = real[:, offset : offset + Q]  # (B, Q)
    if expect is not None:
        expected = expected_keep(expect, K, batch=B, lengths=lengths, side=side, q_len=Q, offset=offset)
        wrong = keep != expected
    else:
        wrong = (keep & ~real[:, None, :]) | ~keep.any(dim=-1, keepdim=True)  # pad keys kept, or nothing kept
    return not bool((wrong & real_rows[:, :, None]).any())


def _inverted_message(convention: str, what: Text) -> tuple[str, dict]:
    """The message key and its fields (the finder adds {n} and {s}) for a mask that is ``what`` read with the
    opposite convention."""
    if convention == "additive":
        return "mask_doctor.inverted_float", {"what": what}
    other = "block" if convention == "keep" else "keep"
    return "mask_doctor.inverted", {"what": what, "meaning": msg(f"mask_doctor.meaning_{other}"), "other": other}


def _float_notes(mask: Tensor, fully: Tensor, reference: Tensor | None, what: Text) -> list[Text]:
    """Notes on an additive mask (B, Q, K): 0/1 only, bias cells, float16 -inf rows."""
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
            _, q, k = first_cells(bias, 1)[0]
            n, low, high = int(bias.sum()), float(mask[bias].min()), float(mask[bias].max())
            values = f"{low:g}" if low == high else msg("mask_doctor.value_range", low=low, high=high)
            verb_s = PluralS(n, singular=True)
            notes.append(msg("mask_doctor.bias", n=n, s=PluralS(n), verb_s=verb_s, values=values, q=q, k=k))
    if mask.dtype == torch.float16 and bool((torch.isneginf(mask) & fully[..., None]).any()):
        notes.append(msg("mask_doctor.fp16_inf"))
    return notes


def _causal_offset(keep: Tensor) -> int | None:
    """The offset o at which ``keep`` (B, Q, K) is exactly ``causal_mask(Q, K, offset=o)`` in every sequence."""
    Q, K = keep.shape[-2:]
    first_row = keep[0, 0]  # (K,)
    n_kept = int(first_row.sum())
    if n_kept == 0 or not bool(first_row[:n_kept].all()):
        return None
    candidate = n_kept - 1  # row 0 keeps keys 0 .. o
    return candidate if bool((keep == causal_mask(Q, K, offset=candidate)).all()) else None


def _reading_notes(reading: _Reading, k_len: int, given: bool) -> list[Text]:
    if reading.key_mask:
        return [msg("mask_doctor.key_mask", T=k_len)]
    if not reading.as_rows:
        return []
    first, last = reading.offset, reading.offset + reading.q_len - 1
    key = "mask_decode.read_rows_given" if given else "mask_decode.read_rows"
    where = msg("mask_decode.at_position", first=first)
    if last > first:
        where = msg("mask_decode.at_positions", first=first, last=last)
    fields = {"where": where, "k_len": k_len, "offset": reading.offset, "s": PluralS(reading.q_len)}
    fields["s_offset"] = PluralS(reading.offset)
    return [msg(key, q_len=reading.q_len, **fields)]


def _cross_fields(doc: Tensor, offset: int):
    """``extra`` for the cross_document finder: the documents of the first example, and of every example (row q
    is the query at position offset + q)."""

    def extra(found: list[tuple[int, int, int]]) -> tuple[dict, dict]:
        pairs = [[int(doc[offset + q]), int(doc[k])] for _, q, k in found]
        return {"doc_q": pairs[0][0], "doc_k": pairs[0][1]}, {"documents": pairs}

    return extra


def diagnose(
    mask: Tensor,
    *,
    convention: str | None = None,
    expect: Expectation | None = None,
    lengths: list[int] | None = None,
    side: str = "right",
    q_len: int | None = None,
    offset: int | None = None,
) -> Diagnosis:
    """Find what is wrong with ``mask``: bool or float, (q_len, k_len) or (B, q_len, k_len), or (..., 1, T) broadcast
    over queries.

    convention: "keep" or "block" for a bool mask (None: inferred from the
    diagonal); a float mask is additive. expect: what it should be; lengths and
    side: the real length of each sequence and where the pads go. q_len: the
    number of query rows (1: a (1, T) mask is one decode step, not a key mask);
    offset: the absolute position of the first query (default ``k_len - q_len``,
    bottom-right). ValueError for arguments that do not fit together (a float
    mask read as keep, padding without lengths, a negative offset); a mask that
    does not fit them is a ``bad_shape`` problem.
    """
    lengths = _check_lengths(lengths)
    q_len = _check_count(q_len, "q_len", 1)
    offset = _check_count(offset, "offset", 0)
    if side not in SIDES:
        raise ValueError(msg("mask_doctor.side", side=repr(side)))
    if expect is not None and expect.needs_lengths and lengths is None:
        raise ValueError(msg("mask_doctor.needs_lengths", expect=expect))
    if expect is not None and expect.kind == "documents" and lengths is not None:
        raise ValueError(msg("mask_decode.documents_lengths"))
    shape = tuple(mask.shape)
    if mask.ndim not in (2, 3) or 0 in shape:
        raise ValueError(msg("mask_doctor.rank", dims=_dims(shape)))
    reading = _reading(shape, q_len, offset, expect)
    convention, reason = _convention(mask, convention, reading.offset if reading.bad is None else 0)
    documents = list(expect.documents) if expect is not None and expect.kind == "documents" else None
    shown_offset = reading.offset if reading.as_rows else None
    bad = _shape_problem(shape, lengths) or reading.bad
    if bad is not None:
        why, text = bad
        extra = {"reason": why, "detail": str(text)}
        problem = Problem("bad_shape", 1, [], torch.zeros(shape, dtype=torch.bool), text, extra=extra)
        return Diagnosis(convention, reason, shape, [problem], [], offset=shown_offset, documents=documents)
    batched = mask.ndim == 3
    m = mask if batched else mask[None]  # (B, rows, K)
    B, K = m.shape[0], shape[-1]
    if reading.key_mask:
        m = m.expand(B, K, K)
    Q, off = reading.q_len, reading.offset
    notes = _reading_notes(reading, K, offset is not None)
    keep = to_keep(m, convention)  # (B, Q, K)
    real = real_tokens(lengths, B, K, side)  # (B, K)
    rows = real[:, off : off + Q, None]  # (B, Q, 1): the queries whose output is used
    expected = None
    if expect is not None:
        expected = expected_keep(expect, K, batch=B, lengths=lengths, side=side, q_len=Q, offset=off)
    if expected is not None:
        reference, what = expected, msg("mask_doctor.the_expected", desc=expect.describe())
    else:
        reference, what = _reference_without_expectation(~keep, off) or (None, "")
    fully = ~keep.any(dim=-1)  # (B, Q)
    if convention == "additive":
        notes += _float_notes(m, fully, reference, what)
    finder = Finder(batched, off, positions=reading.as_rows)

    def result() -> Diagnosis:
        shown_expected = None if expected is None else finder.shaped(expected)
        return Diagnosis(
            convention,
            reason,
            shape,
            finder.ordered(),
            notes,
            finder.shaped(keep),
            shown_expected,
            offset=shown_offset,
            documents=documents,
        )

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
        if lengths is not None and not bool((fully & rows[..., 0]).any()):
            effect = concat(effect, msg("mask_doctor.effect_padding"))
        finder.add_rows(
            "fully_masked_row",
            fully,
            fully[..., None].expand(B, Q, K),
            "mask_doctor.fully_masked_row",
            self_key=False,
            effect=effect,
        )
    if expected is None and lengths is None:
        return result()

    allowed = expected if expected is not None else real[:, None, :].expand(B, Q, K)  # (B, Q, K)
    extra = keep & ~allowed & rows  # kept cells that should be blocked
    if lengths is not None:
        padded = extra & ~real[:, None, :]  # real queries keeping pad keys
        other = "left" if side == "right" else "right"
        hint = ""
        if _fits_side(keep, expect, lengths, other, off):
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
    if documents is not None:
        doc = document_index(documents)  # (K,)
        cross = doc[off : off + Q, None] != doc[None, :]  # (Q, K): key in another document
        finder.add_cells(
            "cross_document", extra & cross, "mask_decode.cross_document", extra=_cross_fields(doc, off), desc=desc
        )
        extra = extra & ~cross
    future = extra & future_cells(Q, K, off)  # keys after the query
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
    diagonal = self_cells(Q, K, off)  # (Q, K)
    missing = ~keep & expected & rows & diagonal  # (B, Q, K)
    at_offset = {"offset": off} if reading.as_rows else {}
    finder.add_rows(
        "missing_self",
        missing.any(dim=-1),
        missing,
        "mask_decode.missing_self_at" if reading.as_rows else "mask_doctor.missing_self",
        self_key=True,
        desc=desc,
        **at_offset,
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
    if reading.as_rows and expect.kind == "causal" and lengths is None and finder.problems:
        found = _causal_offset(keep)
        if found is not None and found != off:
            key = "mask_decode.offset_top_left" if found == 0 else "mask_decode.offset_hint"
            notes.append(msg(key, found=found, offset=off, q_len=Q, k_len=K))
    if reading.key_mask and shape[-2] == 1 and expect.causal and finder.problems:
        notes.append(msg("mask_decode.key_mask_hint", T=K))
    return result()

"""``attnviz mask-doctor``: read an attention mask file safely and say what is wrong with it.

Its torch-backed imports are inside :func:`mask_doctor_command` (why: :mod:`attnviz.cli`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from attnviz.cli.arguments import integer
from attnviz.cli.checks import CheckFailedError, CommandError
from attnviz.cli.output import out

if TYPE_CHECKING:
    from attnviz.labs.masks.doctor import Diagnosis
    from attnviz.labs.masks.reading import LoadedMask

ROW_PROBLEMS = ("fully_masked_row", "missing_self")  # counted in query rows, not cells


def mask_report(loaded: LoadedMask, diagnosis: Diagnosis, convention_line: str, expect: str | None) -> str:
    """The readable mask-doctor report: what was read, one line per problem with its examples, the notes.

    Queries are named by their position, as the messages name them: a step's row q is the query at
    ``offset + q`` (``--json`` gives the mask's own [row, column] and the offset)."""
    dtype = str(loaded.mask.dtype).removeprefix("torch.")
    batched = len(diagnosis.shape) == 3
    shift = diagnosis.offset or 0
    lines = [f"{loaded.name}: {dtype} {tuple(diagnosis.shape)} (stored as {loaded.stored_dtype})"]
    lines.append(f"convention: {convention_line}")
    lines.append(f"expected: {expect or 'nothing stated (structural checks only)'}")
    for problem in diagnosis.problems:
        unit = "rows" if problem.kind in ROW_PROBLEMS else "cells"
        count = "" if problem.kind == "bad_shape" else f" ({problem.count:,} {unit})"
        lines.append(f"PROBLEM {problem.kind}{count}: {problem.message}")
        if problem.examples:
            shown = [
                f"{b}:[{q + shift}, {k}]" if batched else f"[{q + shift}, {k}]"
                for b, (q, k) in zip(problem.batch_examples, problem.examples, strict=True)
            ]
            label = "sequence:[q, k]" if batched else "[q, k]"
            lines.append(f"  examples {label}: " + " ".join(shown))
        if "documents" in problem.extra:  # cross_document: each example's query and key documents
            lines.append("  documents (query→key): " + " ".join(f"{dq}→{dk}" for dq, dk in problem.extra["documents"]))
    lines += [f"note: {note}" for note in (*loaded.notes, *diagnosis.notes)]
    lines.append("ok: no problems found" if diagnosis.ok else f"{len(diagnosis.problems)} kind(s) of problem found")
    return "\n".join(lines)


def mask_doctor_command(args: argparse.Namespace) -> int:
    """Read a mask file safely and say what is wrong with it: exit 0 clean, 1 problems, 2 unreadable or bad input."""
    from attnviz.labs.masks.doctor import diagnose, parse_expect, parse_lengths
    from attnviz.labs.masks.reading import read_mask_file

    try:
        expect = parse_expect(args.expect) if args.expect is not None else None
        lengths = parse_lengths(args.lengths) if args.lengths is not None else None
        loaded = read_mask_file(args.file)  # MaskFileError, a ValueError, for anything unsafe or unreadable
    except ValueError as err:
        raise CommandError(str(err)) from err
    floating = loaded.mask.dtype.is_floating_point
    if floating and args.convention is not None:
        raise CommandError("a float mask is additive; --convention applies to bool masks")
    convention = None if floating else (args.convention or "keep")
    try:
        diagnosis = diagnose(
            loaded.mask,
            convention=convention,
            expect=expect,
            lengths=lengths,
            side=args.side,
            q_len=args.q_len,
            offset=args.offset,
        )
    except ValueError as err:
        raise CommandError(str(err)) from err
    if args.json:
        out.json(diagnosis.to_json(), indent=2)
    else:
        line = diagnosis.convention_reason
        if not floating and args.convention is None:
            line = (
                "keep, the default for a bool mask: True = may attend (--convention block if True marks blocked keys)"
            )
        out.line(mask_report(loaded, diagnosis, line, args.expect and str(expect)))
    if not diagnosis.ok:
        raise CheckFailedError("problems found: " + ", ".join(p.kind for p in diagnosis.problems))
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """``mask-doctor``: the file, what it should be, its shape's reading, --json."""
    doctor = sub.add_parser("mask-doctor", help="check an attention mask file (.npy, .pt, .safetensors, .csv)")
    doctor.add_argument(
        "file",
        help="the mask: (T, T), (q_len, k_len) for a decode step or chunk over a KV cache, or (B, ...) for a batch;"
        " read without running any code in it",
    )
    doctor.add_argument(
        "--expect",
        default=None,
        help="what it should be: causal, padding, causal+padding, sliding:W, prefix:P, documents:L1,L2,..."
        " (packed documents, block-diagonal causal) or bidirectional-documents:L1,L2,... (an encoder's)",
    )
    doctor.add_argument(
        "--q-len",
        type=integer,
        default=None,
        help="query rows in the mask (1: a (1, T) mask is a decode step, not a key mask)",
    )
    doctor.add_argument(
        "--offset",
        type=integer,
        default=None,
        help="position of the first query (tokens in the KV cache; default k_len - q_len, aligned bottom-right)",
    )
    doctor.add_argument("--lengths", default=None, help="each sequence's real length, e.g. 5,3 (for a batch)")
    doctor.add_argument("--side", choices=["right", "left"], default="right", help="where the pads go")
    doctor.add_argument(
        "--convention", choices=["keep", "block"], default=None, help="a bool mask's True: may attend (keep, default)"
    )
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    doctor.set_defaults(func=mask_doctor_command, parser=doctor)

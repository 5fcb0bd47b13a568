"""``attnviz scaling``: every head's softmax entropy under 1/√d_k, no scale and 1/√d_model.

Its torch-backed imports are inside :func:`scaling_command`, after the checks (why: :mod:`attnviz.cli`)."""

from __future__ import annotations

import argparse

from attnviz.cli.arguments import add_text_and_model_arguments
from attnviz.cli.checks import CommandError, check_text_arguments
from attnviz.cli.output import out


def scaling_command(args: argparse.Namespace) -> int:
    if args.threshold is not None and not 0.0 < args.threshold <= 1.0:
        raise CommandError(f"--threshold ({args.threshold}) must be in (0, 1]")
    check_text_arguments(args)
    from attnviz.cli.loading import capture_for
    from attnviz.labs.scaling import SATURATED, scaling_json, scaling_rows

    threshold = SATURATED if args.threshold is None else args.threshold

    source, record = capture_for(args, keep_qk=True)  # the scales are recomputed from q and k
    try:
        rows = scaling_rows(record, source.d_model, source.head_dim, device=source.device)
    except ValueError as err:
        raise CommandError(str(err)) from err
    result = scaling_json(rows, threshold)
    if args.json:
        out.json(result, indent=2)
        return 0
    table = rows.table(threshold)
    out.line(f"{record.model_name}: {record.q_len} tokens, d_k {source.head_dim}, d_model {source.d_model}")
    out.line("scales: " + ", ".join(f"{kind} = {factor:.4g}" for kind, factor in rows.factors.items()))
    columns = ["layer", "head", *(f"{stat}_{kind}" for stat in ("entropy", "saturated_share") for kind in rows.factors)]
    out.line(table[columns].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """``scaling``: the text and model flags, --threshold."""
    scaling = sub.add_parser("scaling", help="every head's softmax entropy under 1/√d_k, no scale and 1/√d_model")
    add_text_and_model_arguments(scaling)
    scaling.add_argument(  # default None: the lab's SATURATED, read when the command runs
        "--threshold", type=float, default=None, help="a row is saturated at this max weight"
    )
    scaling.set_defaults(func=scaling_command, parser=scaling)

"""``attnviz scaling``: every head's softmax entropy under 1/√d_k, no scale and 1/√d_model."""

from __future__ import annotations

import argparse

from attnviz.cli.checks import CommandError
from attnviz.cli.loading import add_text_and_model_arguments, capture_for
from attnviz.cli.output import out
from attnviz.labs.scaling import SATURATED, scaling_json, scaling_rows


def scaling_command(args: argparse.Namespace) -> int:
    if not 0.0 < args.threshold <= 1.0:
        raise CommandError(f"--threshold ({args.threshold}) must be in (0, 1]")
    source, record = capture_for(args, keep_qk=True)  # the scales are recomputed from q and k
    try:
        rows = scaling_rows(record, source.d_model, source.head_dim)
    except ValueError as err:
        raise CommandError(str(err)) from err
    result = scaling_json(rows, args.threshold)
    if args.json:
        out.json(result, indent=2)
        return 0
    table = rows.table(args.threshold)
    out.line(f"{record.model_name}: {record.q_len} tokens, d_k {source.head_dim}, d_model {source.d_model}")
    out.line("scales: " + ", ".join(f"{kind} = {factor:.4g}" for kind, factor in rows.factors.items()))
    columns = ["layer", "head", *(f"{stat}_{kind}" for stat in ("entropy", "saturated_share") for kind in rows.factors)]
    out.line(table[columns].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """``scaling``: the text and model flags, --threshold."""
    scaling = sub.add_parser("scaling", help="every head's softmax entropy under 1/√d_k, no scale and 1/√d_model")
    add_text_and_model_arguments(scaling)
    scaling.add_argument("--threshold", type=float, default=SATURATED, help="a row is saturated at this max weight")
    scaling.set_defaults(func=scaling_command, parser=scaling)

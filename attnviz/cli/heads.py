"""``attnviz heads``: per-head attention statistics for a text; with --parity, our attention against the model's.

Its torch-backed imports are inside :func:`heads_command`, after the checks (why: :mod:`attnviz.cli`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from attnviz.cli.arguments import add_text_and_model_arguments
from attnviz.cli.checks import CheckFailedError, CommandError, check_text_arguments
from attnviz.cli.output import json_number, out
from attnviz.errors import ModelUnavailableError, ParityUnsupportedError

if TYPE_CHECKING:
    from attnviz.models.record import AttentionRecord


def heads_json(record: AttentionRecord) -> dict:
    """A record's per-head statistics as ``heads --json`` prints them (``compare`` prints the same for A and B)."""
    return {
        "model": record.model_name,
        "implementation": record.implementation,
        "tokens": [t.text for t in record.tokens],
        "n_input_tokens": record.n_input_tokens,
        "truncated": record.truncated,
        "n_layer": record.n_layer,
        "n_head": record.n_head,
        "n_kv_head": record.n_kv_head,
        "causal": record.causal,
        "stats": [
            {
                "layer": int(row["layer"]),
                "head": int(row["head"]),
                **{c: json_number(row[c]) for c in record.stat_columns},
                "flags": row["flags"],
            }
            for row in record.statistics.to_dict("records")
        ],
    }


def heads_command(args: argparse.Namespace) -> int:
    check_text_arguments(args)
    from attnviz.cli.loading import capture_for

    source, record = capture_for(args, keep_qk=False)  # statistics only: no q, k kept
    stats = record.statistics
    result = heads_json(record)
    failed = None
    if args.parity:
        try:
            parity = source.check_parity(args.text, args.max_tokens)
        except ParityUnsupportedError as err:
            result["parity_max_abs_diff"] = None
            result["parity_note"] = str(err)
        except ModelUnavailableError as err:
            raise CommandError(f"--parity: {err}") from err
        else:
            result["parity_max_abs_diff"] = parity.worst
            result["parity_tokens"] = int(parity.ours.shape[-1])
            if not parity.matches:
                failed = f"parity: max |ours - model| = {parity.worst:.3e} exceeds the tolerance {parity.tolerance:g}"
    if args.json:
        out.json(result, indent=2)
    else:
        out.line(f"{record.model_name}: {len(record.tokens)} tokens, {record.n_layer} layers x {record.n_head} heads")
        if record.truncated:
            out.line(f"(truncated from {record.n_input_tokens} tokens)")
        if result.get("parity_max_abs_diff") is not None:
            out.line(f"parity: max |ours - model| = {result['parity_max_abs_diff']:.3e}")
        out.line(stats.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if failed:
        raise CheckFailedError(failed)
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """``heads``: the text and model flags, --parity."""
    heads = sub.add_parser("heads", help="per-head attention statistics for a text")
    add_text_and_model_arguments(heads)
    heads.add_argument("--parity", action="store_true", help="also run our attention on the model's layers and compare")
    heads.set_defaults(func=heads_command, parser=heads)

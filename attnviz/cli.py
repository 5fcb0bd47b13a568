"""The command line: ``python -m attnviz <subcommand>``.

Subcommands share one parser so later ones (kv-cache, mask-doctor, bench)
slot in beside ``heads``. Bad input exits non-zero with a one-line reason on
stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence

from attnviz import __version__
from attnviz.devices import DEVICE_CHOICES, resolve_device
from attnviz.embedded import EmbeddedConfig, EmbeddedModel
from attnviz.head_stats import STAT_COLUMNS, head_statistics


class CommandError(Exception):
    """A problem with the user's input, reported as one line on stderr."""


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else round(float(value), 6)


def heads_command(args: argparse.Namespace) -> int:
    if not args.text.strip():
        raise CommandError("the text is empty; give some words to analyse")
    try:
        config = EmbeddedConfig(
            d_model=args.d_model,
            n_head=args.n_head,
            n_kv_head=args.n_kv_head,
            n_layer=args.n_layer,
            seed=args.seed,
            causal=args.causal,
        )
        device = resolve_device(args.device)
        if args.max_tokens < 1:
            raise ValueError(f"--max-tokens ({args.max_tokens}) must be at least 1")
    except ValueError as err:
        raise CommandError(str(err)) from err
    record = EmbeddedModel(config).to(device).run(args.text, args.max_tokens)
    stats = head_statistics(record.attention, record.mask)
    result = {
        "model": record.model_name,
        "implementation": record.implementation,
        "tokens": [t.text for t in record.tokens],
        "n_input_tokens": record.n_input_tokens,
        "truncated": record.truncated,
        "n_layer": record.n_layer,
        "n_head": record.n_head,
        "n_kv_head": record.n_kv_head,
        "stats": [
            {
                "layer": int(row["layer"]),
                "head": int(row["head"]),
                **{c: _finite(row[c]) for c in STAT_COLUMNS},
                "flags": row["flags"],
            }
            for row in stats.to_dict("records")
        ],
    }
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
    else:
        print(f"{record.model_name}: {len(record.tokens)} tokens, {record.n_layer} layers x {record.n_head} heads")
        if record.truncated:
            print(f"(truncated from {record.n_input_tokens} tokens)")
        print(stats.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m attnviz", description="See what multi-head attention does to text."
    )
    parser.add_argument("--version", action="version", version=f"attnviz {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    heads = sub.add_parser("heads", help="per-head attention statistics for a text")
    heads.add_argument("text", help="the text to analyse")
    heads.add_argument("--json", action="store_true", help="print a JSON object")
    heads.add_argument("--max-tokens", type=int, default=256)
    heads.add_argument("--device", choices=DEVICE_CHOICES, default="auto")
    heads.add_argument("--d-model", type=int, default=64)
    heads.add_argument("--n-head", type=int, default=4)
    heads.add_argument("--n-kv-head", type=int, default=None)
    heads.add_argument("--n-layer", type=int, default=2)
    heads.add_argument("--seed", type=int, default=0)
    heads.add_argument("--causal", action="store_true", help="decoder-style causal mask")
    heads.set_defaults(func=heads_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.func(args)
    except CommandError as err:
        print(f"attnviz {args.command}: error: {err}", file=sys.stderr)
        return 2

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
from attnviz.hf_models import ModelUnavailableError, load_model
from attnviz.parity import ParityUnsupportedError, reproduce


class CommandError(Exception):
    """A problem with the user's input, reported as one line on stderr."""


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else round(float(value), 6)


def load_cli_model(args: argparse.Namespace):
    """The model named by --model: "default" (embedded, sized by the flags), "minilm", "smollm2" or a path."""
    device = resolve_device(args.device)
    if args.model == "default":
        config = EmbeddedConfig(
            d_model=args.d_model,
            n_head=args.n_head,
            n_kv_head=args.n_kv_head,
            n_layer=args.n_layer,
            seed=args.seed,
            causal=args.causal,
        )
        return EmbeddedModel(config).to(device)
    progress = (
        (lambda fraction, message: print(f"[{fraction:4.0%}] {message}", file=sys.stderr)) if not args.quiet else None
    )
    return load_model(args.model, device, allow_pickle=args.allow_pickle, progress=progress)


def heads_command(args: argparse.Namespace) -> int:
    if not args.text.strip():
        raise CommandError("the text is empty; give some words to analyse")
    try:
        if args.max_tokens < 1:
            raise ValueError(f"--max-tokens ({args.max_tokens}) must be at least 1")
        model = load_cli_model(args)
    except (ValueError, ModelUnavailableError) as err:
        raise CommandError(str(err)) from err
    record = model.run(args.text, args.max_tokens)
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
        "causal": record.causal,
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
    if args.parity:
        if isinstance(model, EmbeddedModel):
            result["parity_max_abs_diff"] = None
            result["parity_note"] = "the embedded model runs attnviz's own attention; there is no other to compare"
        else:
            try:
                parity = reproduce(model, model.encode(args.text, args.max_tokens)[0])
            except ParityUnsupportedError as err:
                raise CommandError(f"--parity: {err}") from err
            result["parity_max_abs_diff"] = parity.worst
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
    else:
        print(f"{record.model_name}: {len(record.tokens)} tokens, {record.n_layer} layers x {record.n_head} heads")
        if record.truncated:
            print(f"(truncated from {record.n_input_tokens} tokens)")
        if "parity_max_abs_diff" in result and result["parity_max_abs_diff"] is not None:
            print(f"parity: max |ours - model| = {result['parity_max_abs_diff']:.3e}")
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
    heads.add_argument(
        "--model", default="default", help="default (embedded), minilm, smollm2, or a local model folder / hub id"
    )
    heads.add_argument("--parity", action="store_true", help="also run our attention on the model's layers and compare")
    heads.add_argument(
        "--allow-pickle",
        action="store_true",
        help="allow a local model whose weights are pickled (*.bin); trust it first",
    )
    heads.add_argument("--quiet", action="store_true", help="no loading progress on stderr")
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
    except BrokenPipeError:  # `... | head` closed the pipe: not an error
        sys.stderr.close()
        return 0
    except CommandError as err:
        print(f"attnviz {args.command}: error: {err}", file=sys.stderr)
        return 2

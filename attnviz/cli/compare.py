"""``attnviz compare``: two texts, two models with one tokenizer, or one model under two masks, side by side.

Its torch-backed imports are inside the functions that run the command, after the checks (why: :mod:`attnviz.cli`).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING

from attnviz import settings
from attnviz.cli.arguments import add_text_and_model_arguments, integer
from attnviz.cli.checks import TEXT_BOUNDS, CommandError, check_bounds, check_budget, check_text
from attnviz.cli.heads import heads_json
from attnviz.cli.output import json_number, out
from attnviz.errors import ModelUnavailableError

if TYPE_CHECKING:
    from attnviz.models.source import AttentionSource

COMPARE_BOUNDS = {"seed_b": dataclasses.replace(settings.SEED, name="--seed-b")}


def compare_sources(args: argparse.Namespace) -> tuple[AttentionSource, AttentionSource, argparse.Namespace]:
    """Source A (--model) and source B (--model-b, --seed-b or --mask-b; A itself when none is given), and B's
    arguments; CommandError when B cannot be compared with A (another tokenizer, a mask that is not a setting)."""
    from attnviz.cli.loading import load_cli_source
    from attnviz.labs.compare import same_tokens, tokens_differ
    from attnviz.models.registry import EMBEDDED

    if args.mask_b is not None and (args.model_b is not None or args.seed_b is not None):
        raise CommandError("--mask-b compares one model under two masks; leave out --model-b and --seed-b")
    if args.mask_b is not None and args.model != EMBEDDED:
        raise CommandError(
            f"--mask-b needs a model whose mask is a setting (the embedded model, {EMBEDDED!r}: causal or "
            f"bidirectional under the same weights); {args.model!r} attends only under its own mask, and attnviz "
            "cannot capture it under another"
        )
    causal_b = args.causal if args.mask_b is None else args.mask_b == "causal"
    seed_b = args.seed if args.seed_b is None else args.seed_b
    # only a missing --model-b means A's model: --model-b '' names no model, an error as --model '' is
    model_b = args.model if args.model_b is None else args.model_b
    args_b = argparse.Namespace(
        **{**vars(args), "text": args.text_b, "model": model_b, "seed": seed_b, "causal": causal_b}
    )
    source_a = load_cli_source(args)
    if (args_b.model, args_b.seed, args_b.causal) == (args.model, args.seed, args.causal):
        return source_a, source_a, args_b
    source_b = load_cli_source(args_b)
    if args.mask_b is None:  # two models: only on the same tokens
        for text in (args.text, args.text_b):
            read_a, read_b = source_a.encode(text, args.max_tokens), source_b.encode(text, args.max_tokens)
            if not same_tokens(read_a, read_b):
                raise CommandError(str(tokens_differ(source_a.name, source_b.name, read_a, read_b)))
    return source_a, source_b, args_b


def compare_command(args: argparse.Namespace) -> int:
    """Two captures side by side: each as ``heads --json`` prints it, each statistic's b - a per head, the JSD."""
    for what, text in (("TEXT_A", args.text), ("TEXT_B", args.text_b)):
        check_text(text, what)
        if not text.strip():
            raise CommandError(f"{what} is empty; give some words to compare")
    check_bounds(args, {**TEXT_BOUNDS, **COMPARE_BOUNDS})
    from attnviz.labs.compare import compare_records

    try:
        source_a, source_b, args_b = compare_sources(args)
        check_budget(source_a, args)
        check_budget(source_b, args_b)
        record_a = source_a.run(args.text, args.max_tokens, keep_qk=True)  # the JSD reads rows back from q and k
        record_b = source_b.run(args.text_b, args.max_tokens, keep_qk=True)
        comparison = compare_records(record_a, record_b)
    except (ValueError, ModelUnavailableError) as err:
        raise CommandError(str(err)) from err
    diff = [] if comparison.diff is None else comparison.diff.to_dict("records")
    jsd = [] if comparison.jsd is None else comparison.jsd.to_dict("records")
    alignment = comparison.alignment
    result = {
        "a": heads_json(record_a, args.text),
        "b": heads_json(record_b, args.text_b),
        "diff": [
            {
                "layer": int(row["layer"]),
                "head": int(row["head"]),
                **{c: json_number(row[c]) for c in comparison.statistics},
            }
            for row in diff
        ],
        "jsd": [
            {
                "layer": int(row["layer"]),
                "head": int(row["head"]),
                "jsd": json_number(row["jsd"]),
                "n_queries": int(row["n_queries"]),
            }
            for row in jsd
        ],
        "alignment": {
            "aligned": len(alignment),
            "n_a": alignment.n_a,
            "n_b": alignment.n_b,
            "unaligned_cut": alignment.cut,
            "max_queries": comparison.queries,
        },
        "note": None if comparison.note is None else str(comparison.note),
    }
    if args.json:
        out.json(result, indent=2)
        return 0
    out.line(
        f"A: {record_a.model_name}: {len(record_a.tokens)} tokens, {record_a.n_layer} layers x {record_a.n_head} heads"
    )
    out.line(
        f"B: {record_b.model_name}: {len(record_b.tokens)} tokens, {record_b.n_layer} layers x {record_b.n_head} heads"
    )
    out.line(
        f"aligned: {len(alignment)} of A's {alignment.n_a} tokens with B's {alignment.n_b}; "
        f"JSD (bits) over at most {comparison.queries} aligned queries per head"
    )
    if comparison.note is not None:
        out.line(f"note: {comparison.note}")
        return 0
    largest = comparison.largest().merge(comparison.diff, on=["layer", "head"])
    out.line(f"the {len(largest)} heads whose pattern moved most (jsd), and each statistic's b - a:")
    out.line(largest.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """``compare``: TEXT_A and TEXT_B with the text and model flags, and what B changes."""
    compare = sub.add_parser(
        "compare", help="two texts, two models with one tokenizer, or two masks side by side: per-head statistics"
    )
    add_text_and_model_arguments(compare)
    compare.add_argument(
        "text_b", metavar="TEXT_B", help="the second text (B); the same text to compare models or masks"
    )
    for action in compare._actions:
        if action.dest == "text":
            action.metavar, action.help = "TEXT_A", "the first text (A)"
    compare.add_argument(
        "--model-b", default=None, help="model B (default: --model); it must read the texts into the same tokens"
    )
    compare.add_argument("--seed-b", type=integer, default=None, help="the embedded model B's seed (default: --seed)")
    compare.add_argument(
        "--mask-b", choices=["causal", "bidirectional"], default=None, help="B: the embedded model under this mask"
    )
    compare.set_defaults(func=compare_command, parser=compare)

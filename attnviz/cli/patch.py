"""``attnviz patch``: activation patching between a clean and a corrupted text, every head (or those named), exact;
with ``--estimate``, attribution patching's figures beside them, its top heads confirmed exactly.

Its torch-backed imports are inside the functions that run the command, after the checks (why: :mod:`attnviz.cli`).
"""

from __future__ import annotations

import argparse
import sys

from attnviz import settings
from attnviz.cli.ablate import SWEEP_BUDGET_S
from attnviz.cli.arguments import add_text_and_model_arguments
from attnviz.cli.checks import CommandError, check_text, check_text_arguments
from attnviz.cli.output import out
from attnviz.cli.prices import stderr_progress
from attnviz.core.files import printable
from attnviz.errors import ModelUnavailableError

METRIC_HELP = (
    "logit-diff:TOKEN_A,TOKEN_B (the logit of A minus B at the last position; the text after the colon is split at "
    "commas, spaces kept: 'logit-diff: Mary, John' is ' Mary' and ' John', each one token), loss (the clean text's "
    "mean next-token loss) or kl (mean KL(clean || run) of the next-token distributions)"
)
CLI_METRICS = ("logit-diff", "loss", "kl")


def check_metric(spec: str):
    """The metric as typed, read before any model is loaded; CommandError naming it otherwise."""
    from attnviz.labs.heads_matter.patching import parse_metric

    try:
        metric = parse_metric(spec)
    except ValueError as err:
        raise CommandError(str(err)) from err
    if metric.kind not in CLI_METRICS:
        raise CommandError(f"unknown metric {spec!r}; give {', '.join(CLI_METRICS)} (logit-diff:TOKEN_A,TOKEN_B)")
    return metric


def check_positions_head(spec: str) -> None:
    """``--positions``: exactly one LAYER.HEAD, read before any model is loaded; CommandError naming it otherwise."""
    from attnviz.labs.heads_matter.head_specs import read_heads

    try:
        read = read_heads(spec)
    except ValueError as err:
        raise CommandError(f"--positions: {err}") from err
    if len(read) != 1 or read[0][1] is None:
        raise CommandError(f"--positions takes one head, LAYER.HEAD (as 9.4), not {printable(spec[:80])!r}")


def positions_report(found, tokens: list[str]) -> list[str]:
    """The readable lines of one head patched at one position at a time: a line a position, its token quoted (its
    leading space seen)."""
    layer, head = found.head
    lines = [f"head {layer}.{head} patched at one position at a time, fraction restored:"]
    for position, (token, v) in enumerate(zip(tokens, found.fractions, strict=True)):
        lines.append(f"  {position:>4} {token!r}: " + ("n/a" if v is None else f"{v:+.4f}"))
    return lines


def patch_report(result, confirmed) -> list[str]:
    """The readable report: the metric on each text, the heads that restore most, a row per layer."""
    lines = [
        f"{result.model}: {len(result.tokens)} tokens, metric {result.metric.label}",
        f"clean {result.clean:.6f}, corrupt {result.corrupt:.6f} (the fraction restored: "
        "(patched - corrupt) / (clean - corrupt))",
    ]
    ranked = result.ranked(10)
    if ranked:
        lines.append("restore most: " + ", ".join(f"{layer}.{head} {v:+.4f}" for layer, head, v in ranked))
    if result.estimate is not None:
        estimate = result.estimate
        lines.append(
            f"estimate ({estimate.passes}, {estimate.seconds:.2f} s): top "
            + ", ".join(f"{layer}.{head} {v:+.4f}" for layer, head, v in estimate.ranked(10))
        )
        agreement = result.agreement()
        if agreement is not None:
            lines.append(
                f"estimate against exact on {agreement.n_heads} heads: Spearman {agreement.spearman:.3f}, "
                f"top-{agreement.k} overlap {agreement.overlap}/{agreement.k}; confirmed exactly: "
                + ", ".join(f"{layer}.{head}" for layer, head in confirmed)
            )
        if estimate.saturated:
            lines.append("saturated heads: " + ", ".join(f"{layer}.{head}" for layer, head in estimate.saturated))
        if estimate.cancelling:
            lines.append("cancelling heads: " + ", ".join(f"{layer}.{head}" for layer, head in estimate.cancelling))
        if agreement is not None:  # the estimate confirmed: where it is wrong, and what each flag caught
            from attnviz.labs.heads_matter.agreement import flag_report

            lines.append(str(flag_report(estimate.values, result.effects, estimate.flags()).message()))
    lines.append("fraction restored, a row per layer:")
    for layer, row in enumerate(result.effects):
        lines.append(f"  L{layer}: " + " ".join("   n/a  " if v is None else f"{v:+.4f}" for v in row))
    return lines


def patch_command(args: argparse.Namespace) -> int:
    """Patch each head's output from the clean run into the corrupted one: the fraction of the metric restored."""
    check_text_arguments(args)
    check_text(args.corrupt, "the corrupted text")
    if not args.corrupt.strip():
        raise CommandError("the corrupted text is empty; give the text to patch into")
    metric = check_metric(args.metric)
    from attnviz.cli.loading import load_cli_source
    from attnviz.labs.heads_matter import patching
    from attnviz.labs.heads_matter.common import token_limit
    from attnviz.labs.heads_matter.head_specs import parse_heads, read_heads
    from attnviz.labs.heads_matter.patch_run import finish_patching, patch_json, start_patching

    sweep_all = args.heads.strip().lower() == "all"
    try:
        if not sweep_all:
            read_heads(args.heads)
        if args.positions is not None:
            check_positions_head(args.positions)
        source = load_cli_source(args)
        n_tokens = token_limit(args.max_tokens, settings.PATCH_TOKENS)
        pair = patching.run_pair(source, args.text, args.corrupt, n_tokens, metric)
        if pair.gap == 0:
            raise CommandError(f"the metric is {pair.clean:.6g} on both texts: nothing to restore")
        heads = (
            [(layer, head) for layer in range(pair.n_layer) for head in range(pair.n_head)]
            if sweep_all
            else parse_heads(args.heads, pair.n_layer, pair.n_head)
        )
        positions_head = None
        if args.positions is not None:
            (positions_head,) = parse_heads(args.positions, pair.n_layer, pair.n_head)
        estimate_texts = (args.text, args.corrupt) if args.estimate else None
        started = start_patching(source, pair, heads, estimate_texts=estimate_texts, positions_head=positions_head)
        more = "" if positions_head is None else f" and head {args.positions.strip()} at each of its positions"
        seconds, heads, confirmed = started.seconds, started.heads, started.confirmed
        if seconds > SWEEP_BUDGET_S and not args.over_budget:
            raise CommandError(
                f"patching {len(heads):,} heads{more} on {pair.n_tokens:,} tokens takes about {seconds:,.0f} s here, "
                f"over the budget of {SWEEP_BUDGET_S:,.0f} s; give fewer --heads or --max-tokens, or pass --over-budget"
            )
        if not args.quiet and (started.pieces > 1 or (more and started.position_passes > 1)):
            print(f"patching {len(heads):,} heads{more}, about {seconds:,.0f} s here", file=sys.stderr)
        result, by_position = finish_patching(source, pair, started, stderr_progress("head", args.quiet))
    except (ValueError, ModelUnavailableError) as err:
        raise CommandError(str(err)) from err
    from attnviz.core.token_display import read_texts

    tokens = read_texts(args.text, pair.clean_encoding.tokens)  # " Mary", its leading space kept
    if args.json:
        out.json(patch_json(result, tokens, confirmed, by_position), indent=2)
        return 0
    lines = patch_report(result, confirmed)
    if by_position is not None:
        lines += positions_report(by_position, tokens)
    for line in lines:
        out.line(printable(line))
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """``patch``: CLEAN CORRUPT, the text and model flags, --metric, --heads, --estimate."""
    patch = sub.add_parser(
        "patch", help="activation patching: which heads carry the difference between a clean and a corrupted text"
    )
    add_text_and_model_arguments(patch)
    patch.add_argument("corrupt", help="the corrupted text, of the clean text's token length")
    patch.add_argument("--metric", required=True, help=METRIC_HELP)
    patch.add_argument(
        "--heads",
        default="all",
        help="LAYER.HEAD[,LAYER.HEAD...] (L.* every head of layer L) or all (default), each patched alone; "
        f"at most {settings.PATCH_TOKENS} tokens are read",
    )
    patch.add_argument(
        "--estimate",
        action="store_true",
        help="also attribution patching's estimate of every head (one forward and one backward), its top 10 "
        "heads confirmed exactly, and its agreement with the exact effects",
    )
    patch.add_argument(
        "--positions",
        default=None,
        metavar="LAYER.HEAD",
        help="also patch this one head at one position at a time (which positions carry its effect: a pass per "
        f"{settings.PATCH_TOKENS} positions at most, each from the head's layer); adds a 'positions' key to --json",
    )
    patch.set_defaults(func=patch_command, parser=patch)

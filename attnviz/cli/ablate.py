"""``attnviz ablate``: knock heads out, or sweep every head alone, and measure what changes.

Its torch-backed imports are inside the functions that run the command, after the checks (why: :mod:`attnviz.cli`).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from attnviz.cli.arguments import add_text_and_model_arguments
from attnviz.cli.checks import CommandError, check_text_arguments
from attnviz.cli.output import out
from attnviz.cli.prices import price_text, stderr_progress
from attnviz.core.files import printable
from attnviz.errors import ModelUnavailableError
from attnviz.settings import ABLATION_MODES, ABLATION_TOKENS, SWEEP_TOKENS

if TYPE_CHECKING:
    from attnviz.labs.heads_matter.ablation import SweepBaseline
    from attnviz.labs.heads_matter.effect import AblationResult
    from attnviz.models.source import AttentionSource


def ablation_report(result: AblationResult, tokens: list[str] | None = None) -> list[str]:
    """The readable ``ablate`` report: what was ablated, the losses and KL (or the hidden change), the top tokens;
    ``tokens`` as the model read them (" Mary", quoted: its leading space seen), else as displayed."""
    tokens = [t.text for t in result.tokens] if tokens is None else tokens
    heads = ", ".join(f"{layer}.{head}" for layer, head in result.heads) or "none"
    lines = [f"{result.model}: {len(result.tokens)} tokens, mode {result.mode}, heads {heads}"]
    if result.truncated:
        lines.append(
            f"(read {len(result.tokens)} of {result.n_input_tokens} tokens; ablate reads at most {ABLATION_TOKENS})"
        )
    if not result.logits:
        lines.append(f"no LM head: mean cosine distance of the last hidden states {result.hidden_change:.6f}")
    elif result.loss_before is None:
        lines.append("one token: no next token to predict, so no loss or mean KL")
    else:
        lines.append(f"loss before {result.loss_before:.6f} nats, after {result.loss_after:.6f} nats")
        lines.append(f"mean KL(before || after) {result.kl_mean:.6f} nats")
    if result.logits:
        for name, top in (("before", result.top_before[-1]), ("after", result.top_after[-1])):
            lines.append(f"top next tokens {name}: " + ", ".join(f"{text!r} {p:.4f}" for text, p in top))
    lines.append("changed most: " + ", ".join(f"{p} {tokens[p]!r} {v:.6f}" for p, v in result.changed_most()))
    return lines


SWEEP_BUDGET_S = 900.0  # a sweep predicted longer exits 2 unless --over-budget (SmolLM2 at 256 tokens: about 300 s)


def check_sweep_budget(source: AttentionSource, args: argparse.Namespace) -> SweepBaseline:
    """The sweep's baseline, its pass timed here at the text's length; its predicted time on stderr (unless
    --quiet); CommandError (exit 2) when it is over SWEEP_BUDGET_S and --over-budget was not given."""
    from attnviz.labs.heads_matter.ablation import sweep_baseline

    baseline = sweep_baseline(source, args.text, args.max_tokens, args.mode)
    heads, n_tokens, seconds = len(baseline.heads), baseline.n_tokens, baseline.seconds(baseline.first)
    if seconds > SWEEP_BUDGET_S and not args.over_budget:
        raise CommandError(
            f"the sweep ablates {heads:,} heads one at a time on {n_tokens:,} tokens, about {seconds:,.0f} s here, "
            f"over the sweep budget of {SWEEP_BUDGET_S:,.0f} s; give fewer --max-tokens or heads, "
            "or pass --over-budget to run it anyway"
        )
    if not args.quiet:  # the count the progress lines go on with: the heads timed first are done already
        price = price_text(heads, len(baseline.first), seconds)
        print(f"the sweep: {heads:,} heads on {n_tokens:,} tokens, {price}", file=sys.stderr)
    return baseline


def ablate_command(args: argparse.Namespace) -> int:
    """Ablate heads on a text: the next-token loss and KL before and after (an encoder: the hidden change)."""
    check_text_arguments(args)
    from attnviz.cli.loading import load_cli_source
    from attnviz.core.token_display import read_texts
    from attnviz.labs.heads_matter.ablation import run_pieces, sweep_result
    from attnviz.labs.heads_matter.effect import ablation_effect
    from attnviz.labs.heads_matter.head_specs import parse_heads, read_heads

    sweep_all = args.heads.strip().lower() == "all"
    try:
        if not sweep_all:
            read_heads(args.heads)  # malformed: exit before loading a model
        source = load_cli_source(args)
        sweep = None
        if not sweep_all:
            heads = parse_heads(args.heads, source.n_layer, source.n_head)
        else:
            baseline = check_sweep_budget(source, args)
            progress = stderr_progress("head", args.quiet)  # a line every 10 s: the time left from the last passes
            sweep = sweep_result(baseline, run_pieces(source, args.text, baseline, {}, progress))
        if sweep is not None:
            heads = [(layer, head) for layer in range(len(sweep.values)) for head in range(source.n_head)]
        result = ablation_effect(source, args.text, args.max_tokens, heads, args.mode)
    except (ValueError, ModelUnavailableError) as err:
        raise CommandError(str(err)) from err
    if args.json:
        value = result.to_json()
        value["tokens"] = read_texts(args.text, result.tokens)  # " Mary", its leading space kept
        if sweep is not None:
            value.update(sweep=sweep.to_json(), sweep_measure=sweep.measure, sweep_tokens=sweep.n_tokens)
        out.json(value, indent=2)
        return 0
    for line in ablation_report(result, read_texts(args.text, result.tokens)):
        out.line(printable(line))
    if sweep is not None:
        out.line(f"every head alone ({sweep.measure}, first {sweep.n_tokens} tokens), a row per layer:")
        for layer, row in enumerate(sweep.values):
            out.line(f"  L{layer}: " + " ".join("   n/a  " if v is None else f"{v:.6f}" for v in row))
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """``ablate``: the text and model flags, --heads, --mode."""
    ablate = sub.add_parser("ablate", help="knock heads out: next-token loss and KL before and after, or hidden change")
    add_text_and_model_arguments(ablate)
    ablate.add_argument(
        "--heads",
        required=True,
        help="LAYER.HEAD[,LAYER.HEAD...] (L.* every head of layer L), or all: every head together, and each alone "
        f"(the sweep, on at most {SWEEP_TOKENS} tokens)",
    )
    ablate.add_argument(
        "--mode",
        choices=ABLATION_MODES,
        default="zero",
        help="zero: the head's input to the output projection is 0; mean: its mean over the positions; "
        f"first: the head attends only to the first token (default zero). Reads at most {ABLATION_TOKENS} tokens",
    )
    ablate.set_defaults(func=ablate_command, parser=ablate)

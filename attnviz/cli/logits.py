"""``attnviz logits``: direct logit attribution, each head's direct contribution to one token's logit at one position,
with the rest (embeddings, MLPs, biases) and every scale read on the way, each with its verdict.

Its torch-backed imports are inside the function that runs the command, after the checks (why: :mod:`attnviz.cli`).
"""

from __future__ import annotations

import argparse
import math

from attnviz import settings
from attnviz.cli.arguments import add_text_and_model_arguments, integer
from attnviz.cli.checks import CommandError, check_text, check_text_arguments
from attnviz.cli.output import out
from attnviz.core.files import printable
from attnviz.errors import ModelUnavailableError

TOP_K = 10  # heads in the readable table


def _number(value) -> float | None:
    """A figure as the JSON prints it: unrounded (the heads' sum plus the rest is the logit to float64), None
    where not finite (JSON has no NaN)."""
    value = float(value)
    return value if math.isfinite(value) else None


def logits_json(found, position: int) -> dict:
    """The JSON object: ``model``, ``tokens``, ``position``, ``token``, ``logit`` (the model's own), ``heads``
    (n_layer × n_head), ``rest`` (so that the heads' sum plus ``rest`` is the frozen-scale reading of the logit) and
    ``scales`` (each read-out with its verdict)."""
    return {
        "model": found.model,
        "tokens": found.tokens,
        "position": position,
        "token": found.token,
        "logit": _number(found.logits[position]),
        "heads": [[_number(v) for v in row] for row in found.per_head[position]],
        "rest": _number(found.rest[position]),
        "scales": found.scales(),
    }


def _scale_words(reading: dict) -> str:
    value = reading["value"]
    return reading["verdict"] if value is None else f"{value:.6g} ({reading['verdict']})"


def logits_report(found, position: int) -> list[str]:
    """The readable report: the logit, the heads that add most to it, the rest and every scale."""
    scales = found.scales()
    joins: dict[str, list[int]] = {}
    for layer, reading in enumerate(scales["join"]):
        joins.setdefault(_scale_words(reading), []).append(layer)
    lines = [
        f"{found.model}: {len(found.tokens)} tokens; the logit of {found.token!r} at position {position} "
        f"({found.tokens[position]!r}): {float(found.logits[position]):.6f}",
        f"heads together {float(found.per_head[position].sum()):+.6f} + rest (embeddings, MLPs, biases) "
        f"{float(found.rest[position]):+.6f}, through the final {scales['final_norm']['value']} (gain "
        f"{scales['final_norm']['gain']}) with its scale "
        f"frozen at this position's (largest error over the positions {found.check_error:.2g})",
        f"top {TOP_K} heads by |contribution|:",
        "  layer  head  contribution",
    ]
    lines += [f"  {layer:>5}  {head:>4}  {value:+12.6f}" for layer, head, value in found.ranked(position, TOP_K)]
    lines.append("scales:")
    lines += [
        f"  join (attention output into the stream), layers {_layers(layers)}: {words}"
        for words, layers in joins.items()
    ]
    lines.append(f"  LM head's input / final norm's output: {_scale_words(scales['head_input'])}")
    lines.append(f"  logits / LM head's output: {_scale_words(scales['logits'])}")
    return lines


def _layers(layers: list[int]) -> str:
    """Layer numbers as a range where they run without a gap ("0-29"), else listed."""
    if layers == list(range(layers[0], layers[-1] + 1)):
        return str(layers[0]) if len(layers) == 1 else f"{layers[0]}-{layers[-1]}"
    return ",".join(map(str, layers))


def logits_command(args: argparse.Namespace) -> int:
    """Each head's direct contribution to a token's logit at a position, through W_O, the final norm with its
    scale frozen and the unembedding."""
    check_text_arguments(args)
    if args.token is not None:
        check_text(args.token, "--token")
        if not args.token:
            raise CommandError("--token is empty; give the text of one token (e.g. ' Mary') or leave it out")
    from attnviz.cli.loading import load_cli_source
    from attnviz.labs.heads_matter.common import token_limit
    from attnviz.labs.heads_matter.direct_logits import direct_logit_attribution

    try:
        source = load_cli_source(args)
        n_tokens = token_limit(args.max_tokens, settings.PATCH_TOKENS)
        found = direct_logit_attribution(source, args.text, n_tokens, args.token, args.position)
    except (ValueError, ModelUnavailableError) as err:
        raise CommandError(str(err)) from err
    position = len(found.tokens) - 1 if args.position is None else args.position % len(found.tokens)
    if not found.checked:
        raise CommandError(
            f"the frozen-scale reading misses the model's logits by up to {found.check_error:.3g}: the heads' "
            "contributions do not add up to the logit for this model; not attributed"
        )
    if args.json:
        from attnviz.core.token_display import read_texts

        value = logits_json(found, position)
        value["tokens"] = read_texts(args.text, source.encode(args.text, n_tokens).tokens)  # " Mary", as read
        out.json(value, indent=2)
        return 0
    for line in logits_report(found, position):
        out.line(printable(line))
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """``logits``: TEXT, the text and model flags, --token, --position."""
    command = sub.add_parser(
        "logits", help="direct logit attribution: each head's direct contribution to one token's logit"
    )
    add_text_and_model_arguments(command)
    command.add_argument(
        "--token",
        default=None,
        help="the text of one token, spaces kept (' Mary'); default the model's top prediction at --position",
    )
    command.add_argument(
        "--position",
        type=integer,
        default=None,
        help=f"the position whose logit is attributed (default the last; negative counts from the end); at most "
        f"{settings.PATCH_TOKENS} tokens are read",
    )
    command.set_defaults(func=logits_command, parser=command)

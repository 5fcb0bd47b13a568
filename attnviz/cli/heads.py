"""``attnviz heads``: per-head attention statistics for a text; with --parity, our attention against the model's.

Its torch-backed imports are inside :func:`heads_command`, after the checks (why: :mod:`attnviz.cli`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from attnviz.cli.arguments import add_text_and_model_arguments, integer
from attnviz.cli.checks import CheckFailedError, CommandError, check_text_arguments
from attnviz.cli.output import json_number, out
from attnviz.errors import ModelUnavailableError, ParityUnsupportedError
from attnviz.settings import MAX_TARGET_GENERATED, TARGET_GENERATED

if TYPE_CHECKING:
    from attnviz.models.record import AttentionRecord, EncoderDecoderRecord

KIND_OF_PART = {"encoder": ("encoder", "self"), "decoder": ("decoder", "causal"), "cross": ("decoder", "cross")}


def heads_json(record: AttentionRecord, text: str | None = None) -> dict:
    """A record's per-head statistics as ``heads --json`` prints them (``compare`` prints the same for A and B);
    ``tokens`` as the model read them from ``text`` (" Mary", its leading space kept), else as displayed."""
    from attnviz.core.token_display import read_texts

    return {
        "model": record.model_name,
        "implementation": record.implementation,
        "tokens": [t.text for t in record.tokens] if text is None else read_texts(text, record.tokens),
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


def pair_json(pair: EncoderDecoderRecord, text: str | None = None) -> dict:
    """An encoder-decoder's per-head statistics: the keys of :func:`heads_json` (its encoder's shape), the target,
    and each head entry with its ``stack`` and ``kind`` ("self", "causal" or "cross") and that kind's statistics."""
    result = heads_json(pair.encoder, text)
    result.update(
        target_tokens=[t.text for t in pair.target_tokens],
        target=pair.target_text,
        generated=pair.generated,
        target_loss=json_number(float(pair.losses.mean())),
        n_decoder_layer=pair.decoder.n_layer,
        n_decoder_head=pair.decoder.n_head,
    )
    result["stats"] = [
        {"stack": stack, "kind": kind, **entry}
        for part, (stack, kind) in KIND_OF_PART.items()
        for entry in heads_json(pair.part(part))["stats"]
    ]
    return result


def _pair_command(args: argparse.Namespace, source) -> int:
    if args.parity:
        raise CommandError("--parity: an encoder-decoder runs on its own eager attention; there is nothing to compare")
    n_generate = args.generate if args.generate is not None else (0 if args.target is not None else TARGET_GENERATED)
    if args.target is not None and not args.target.strip():
        raise CommandError("--target is empty; give the target text, or --generate N")
    try:
        pair = source.run_pair(args.text, args.target or "", args.max_tokens, n_generate=n_generate)
    except (ValueError, ModelUnavailableError) as err:
        raise CommandError(str(err)) from err
    result = pair_json(pair, args.text)
    if args.json:
        out.json(result, indent=2)
        return 0
    out.line(
        f"{pair.model_name}: a source of {len(pair.source_tokens)} tokens, a target of {len(pair.target_tokens)}"
        f"{' (written by the model)' if pair.generated else ''}: {pair.target_text}"
    )
    for part, (stack, kind) in KIND_OF_PART.items():
        record = pair.part(part)
        out.line(f"{stack} {kind}: {record.n_layer} layers x {record.n_head} heads")
        out.line(record.statistics.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def heads_command(args: argparse.Namespace) -> int:
    check_text_arguments(args)
    if args.generate is not None and args.target is not None:
        raise CommandError("give --target TEXT or --generate N, not both")
    if args.generate is not None and not 1 <= args.generate <= MAX_TARGET_GENERATED:
        raise CommandError(f"--generate must be 1 to {MAX_TARGET_GENERATED}, not {args.generate}")
    from attnviz.cli.loading import capture_for, load_cli_source
    from attnviz.models.source import Capability

    try:
        loaded = load_cli_source(args)
    except (ValueError, ModelUnavailableError) as err:
        raise CommandError(str(err)) from err
    if Capability.TARGET in loaded.capabilities:
        return _pair_command(args, loaded)
    if args.target is not None or args.generate is not None:
        raise CommandError(
            f"--target and --generate are for encoder-decoders; {loaded.name} reads one text (a decoder or an encoder)"
        )
    source, record = capture_for(args, keep_qk=False, source=loaded)  # statistics only: no q, k kept
    stats = record.statistics
    result = heads_json(record, args.text)
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
    target = heads.add_argument_group("encoder-decoders (T5, BART, Marian, …): the decoder's text")
    target.add_argument("--target", help="the target text, teacher-forced (default: the model writes one)")
    target.add_argument(
        "--generate",
        type=integer,
        metavar="N",
        help=f"the model writes N target tokens itself, greedy (1-{MAX_TARGET_GENERATED}; {TARGET_GENERATED} by default)",
    )
    heads.set_defaults(func=heads_command, parser=heads)

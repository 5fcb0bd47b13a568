"""The command line: ``python -m attnviz <subcommand>``.

Subcommands share one parser so later ones (kv-cache, mask-doctor, bench)
slot in beside ``heads``. Bad input exits non-zero with a one-line reason on
stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Sequence
from typing import NoReturn

from attnviz import __version__, settings
from attnviz.core.budget import RequestCost, request_cost
from attnviz.core.devices import DEVICE_CHOICES, resolve_device
from attnviz.core.files import printable
from attnviz.core.typed_numbers import ascii_digits
from attnviz.errors import ModelUnavailableError, ParityUnsupportedError, first_line
from attnviz.labs.ablation import (
    ABLATION_MODES,
    ABLATION_TOKENS,
    SWEEP_TOKENS,
    AblationResult,
    SweepBaseline,
    ablation_effect,
    parse_heads,
    read_heads,
    run_pieces,
    sweep_baseline,
    sweep_result,
)
from attnviz.labs.kv.config import KV_DTYPES
from attnviz.labs.masks.doctor import Diagnosis, diagnose, parse_expect, parse_lengths
from attnviz.labs.masks.reading import LoadedMask, read_mask_file
from attnviz.labs.scaling import SATURATED, scaling_json, scaling_rows
from attnviz.labs.training.report import results_table, runs_as_json
from attnviz.labs.training.runs import TrainingConfig, train_scale
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.record import PARITY_TOLERANCE, AttentionRecord
from attnviz.models.registry import EMBEDDED, SourceSpec, open_source
from attnviz.models.source import AttentionSource


class CommandError(Exception):
    """A problem with the user's input, reported as one line on stderr."""


class CheckFailedError(Exception):
    """A check the user asked for (--parity) ran and failed: exit 1 after the output, one line on stderr."""


def stdout_is_unicode() -> bool:
    """Whether stdout can write any character (UTF-8/16/32); ``PYTHONIOENCODING=ascii`` or a latin-1 pipe cannot."""
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "").replace("_", "")
    return encoding.startswith("utf")


class Output:
    """Everything a command prints, so that it survives any stdout encoding.

    JSON is written with ``ensure_ascii`` when stdout is not Unicode: ``\u732b`` escapes are the same JSON,
    so nothing is lost. Text that stdout cannot encode is written with backslash escapes (``\u732b``), and
    :meth:`notice` says so once on stderr.
    """

    def __init__(self) -> None:
        self.escaped = False

    def line(self, text: str = "") -> None:
        encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
        try:
            text.encode(encoding)
        except UnicodeEncodeError:
            text = text.encode(encoding, errors="backslashreplace").decode(encoding)
            self.escaped = True
        print(text)

    def json(self, value, **kwargs) -> None:
        self.line(json.dumps(value, ensure_ascii=not stdout_is_unicode(), **kwargs))

    def notice(self, command: str) -> None:
        if self.escaped:
            encoding = getattr(sys.stdout, "encoding", None)
            print(
                f"attnviz {command}: note: stdout's encoding ({encoding}) cannot show every character; "
                "those were written as \\uXXXX escapes (set PYTHONIOENCODING=utf-8 to see them)",
                file=sys.stderr,
            )


out = Output()


def check_text(text: str, what: str = "the text") -> str:
    """``text`` as typed; CommandError when the command line held bytes that are not UTF-8.

    Python hands such bytes over as lone surrogates (U+DC80-U+DCFF, PEP 383); a tokenizer cannot read
    them, and guessing their encoding would analyse text the user did not type.
    """
    for index, ch in enumerate(text):
        if 0xD800 <= ord(ch) <= 0xDFFF:
            byte = f"byte 0x{ord(ch) - 0xDC00:02X}" if 0xDC80 <= ord(ch) <= 0xDCFF else f"U+{ord(ch):04X}"
            raise CommandError(
                f"{what} is not valid UTF-8 ({byte} at character {index + 1}); pass UTF-8 text "
                "(check the terminal's encoding, e.g. LANG=C.UTF-8)"
            )
    return text


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else round(float(value), 6)


def quiet_libraries(progress_bars: bool) -> None:
    """transformers' and huggingface_hub's warnings off (attnviz reports problems itself, in one line), and
    their progress bars too unless ``progress_bars``: ``--quiet`` means nothing on stderr but an error."""
    import transformers
    from huggingface_hub.utils import disable_progress_bars

    transformers.logging.set_verbosity_error()
    if not progress_bars:
        transformers.logging.disable_progress_bar()
        disable_progress_bars()


def load_cli_source(args: argparse.Namespace) -> AttentionSource:
    """The model named by --model: "default" (embedded, sized by the flags), "minilm", "smollm2" or a path."""
    device = resolve_device(args.device)
    if args.model != EMBEDDED:
        quiet_libraries(progress_bars=not args.quiet)
    config = None
    if args.model == EMBEDDED:
        config = EmbeddedConfig(
            d_model=args.d_model,
            n_head=args.n_head,
            n_kv_head=args.n_kv_head,
            n_layer=args.n_layer,
            seed=args.seed,
            causal=args.causal,
        )
    progress = (
        (lambda fraction, message: print(printable(f"[{fraction:4.0%}] {message}"), file=sys.stderr))
        if not args.quiet
        else None
    )  # the message names the user's --model: a newline or an ANSI escape in it is shown, never obeyed
    spec = SourceSpec(args.model, device, config, allow_pickle=args.allow_pickle)
    return open_source(spec, progress=progress)


# every numeric option, by its argparse dest, and the range a user may give (None: the option may be left out)
TEXT_BOUNDS = {
    "max_tokens": dataclasses.replace(settings.MAX_TOKENS, name="--max-tokens"),
    "d_model": settings.D_MODEL,
    "n_head": settings.N_HEAD,
    "n_kv_head": settings.N_KV_HEAD,
    "n_layer": settings.N_LAYER,
    "seed": settings.SEED,
}
BENCH_THREADS_MAX = 256
BENCH_BOUNDS = {
    "sdpa_tokens": settings.Bound("--sdpa-tokens", 512, 1, settings.MAX_TOKENS.high),
    "capture_tokens": settings.Bound("--capture-tokens", 2048, 1, settings.MAX_TOKENS.high),
    "threads": settings.Bound("--threads", 1, 1, BENCH_THREADS_MAX),
}


def check_bounds(args: argparse.Namespace, bounds: dict[str, settings.Bound]) -> None:
    """CommandError naming the setting and its range for the first value out of it (a list: every value checked).

    The messages are the library's own ("n_layer (0) must be from 1 to 12"), which scripts already read."""
    for dest, bound in bounds.items():
        value = getattr(args, dest, None)
        for item in value if isinstance(value, list) else [value]:
            if item is not None and not bound.low <= item <= bound.high:
                raise CommandError(f"{bound.name} ({item}) must be from {bound.low} to {bound.high}")


def over_budget_line(cost: RequestCost) -> str:
    """The one line a capture over the request budget exits with: its numbers, what fits, and the flag."""
    return (
        f"this request reads {cost.tokens:,} tokens x {cost.n_layer} layers x {cost.n_head} heads = "
        f"{cost.head_tokens:,} head-tokens, over the request budget of {cost.budget:,} (about {cost.peak_gb:,.1f} GB "
        f"and {cost.seconds:,.0f} s here); --max-tokens {cost.max_tokens:,} or fewer fits, "
        "or pass --over-budget to run it anyway"
    )


def check_budget(source: AttentionSource, args: argparse.Namespace) -> None:
    """CommandError (exit 2) when the capture would be over the request budget and --over-budget was not given.

    The same question the local app asks (``attnviz.app.loading.within_budget``), priced from the text's token
    count after encoding, before any capture runs."""
    n_tokens = len(source.encode(args.text, args.max_tokens).tokens)
    cost = request_cost(source.n_layer, source.n_head, source.n_kv_head, source.head_dim, n_tokens)
    if cost.over and not args.over_budget:
        raise CommandError(over_budget_line(cost))


def capture_for(args: argparse.Namespace, keep_qk: bool) -> tuple[AttentionSource, AttentionRecord]:
    """The source --model names and its capture of the text, within the request budget unless --over-budget;
    CommandError for any bad input."""
    check_text(args.text)
    if not args.text.strip():
        raise CommandError("the text is empty; give some words to analyse")
    check_bounds(args, TEXT_BOUNDS)
    try:
        source = load_cli_source(args)
        check_budget(source, args)
        return source, source.run(args.text, args.max_tokens, keep_qk=keep_qk)
    except (ValueError, ModelUnavailableError) as err:
        raise CommandError(str(err)) from err


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


def ablation_report(result: AblationResult) -> list[str]:
    """The readable ``ablate`` report: what was ablated, the losses and KL (or the hidden change), the top tokens."""
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
    lines.append(
        "changed most: " + ", ".join(f"{p} {result.tokens[p].text!r} {v:.6f}" for p, v in result.changed_most())
    )
    return lines


SWEEP_BUDGET_S = 900.0  # a sweep predicted longer exits 2 unless --over-budget (SmolLM2 at 256 tokens: about 300 s)


def check_sweep_budget(source: AttentionSource, args: argparse.Namespace) -> SweepBaseline:
    """The sweep's baseline, its pass timed here at the text's length; its predicted time on stderr (unless
    --quiet); CommandError (exit 2) when it is over SWEEP_BUDGET_S and --over-budget was not given."""
    baseline = sweep_baseline(source, args.text, args.max_tokens, args.mode)
    heads, n_tokens, seconds = len(baseline.heads), baseline.n_tokens, baseline.seconds(baseline.first)
    if seconds > SWEEP_BUDGET_S and not args.over_budget:
        raise CommandError(
            f"the sweep ablates {heads:,} heads one at a time on {n_tokens:,} tokens, about {seconds:,.0f} s here, "
            f"over the sweep budget of {SWEEP_BUDGET_S:,.0f} s; give fewer --max-tokens or heads, "
            "or pass --over-budget to run it anyway"
        )
    if not args.quiet:
        print(f"the sweep: {heads:,} heads on {n_tokens:,} tokens, about {seconds:,.0f} s here", file=sys.stderr)
    return baseline


def ablate_command(args: argparse.Namespace) -> int:
    """Ablate heads on a text: the next-token loss and KL before and after (an encoder: the hidden change)."""
    check_text(args.text)
    if not args.text.strip():
        raise CommandError("the text is empty; give some words to analyse")
    check_bounds(args, TEXT_BOUNDS)
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
            sweep = sweep_result(baseline, run_pieces(source, args.text, baseline, {}))
        if sweep is not None:
            heads = [(layer, head) for layer in range(len(sweep.values)) for head in range(source.n_head)]
        result = ablation_effect(source, args.text, args.max_tokens, heads, args.mode)
    except (ValueError, ModelUnavailableError) as err:
        raise CommandError(str(err)) from err
    if args.json:
        value = result.to_json()
        if sweep is not None:
            value.update(sweep=sweep.to_json(), sweep_measure=sweep.measure, sweep_tokens=sweep.n_tokens)
        out.json(value, indent=2)
        return 0
    for line in ablation_report(result):
        out.line(printable(line))
    if sweep is not None:
        out.line(f"every head alone ({sweep.measure}, first {sweep.n_tokens} tokens), a row per layer:")
        for layer, row in enumerate(sweep.values):
            out.line(f"  L{layer}: " + " ".join("   n/a  " if v is None else f"{v:.6f}" for v in row))
    return 0


def train_scale_command(args: argparse.Namespace) -> int:
    """Three identical runs but for the scale on the scores: the tutorial's "loss stuck", measured."""
    try:
        results = train_scale(steps=args.steps, seed=args.seed)
    except ValueError as err:
        raise CommandError(str(err)) from err
    if args.json:
        out.json(runs_as_json(results), indent=2)
        return 0
    out.line(results_table(results).to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    return 0


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
                **{c: _finite(row[c]) for c in record.stat_columns},
                "flags": row["flags"],
            }
            for row in record.statistics.to_dict("records")
        ],
    }


def heads_command(args: argparse.Namespace) -> int:
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
                failed = f"parity: max |ours - model| = {parity.worst:.3e} exceeds the tolerance {PARITY_TOLERANCE:g}"
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


COMPARE_BOUNDS = {"seed_b": dataclasses.replace(settings.SEED, name="--seed-b")}


def compare_sources(args: argparse.Namespace) -> tuple[AttentionSource, AttentionSource, argparse.Namespace]:
    """Source A (--model) and source B (--model-b, --seed-b or --mask-b; A itself when none is given), and B's
    arguments; CommandError when B cannot be compared with A (another tokenizer, a mask that is not a setting)."""
    from attnviz.labs.compare import same_tokens, tokens_differ

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
    from attnviz.labs.compare import compare_records

    for what, text in (("TEXT_A", args.text), ("TEXT_B", args.text_b)):
        check_text(text, what)
        if not text.strip():
            raise CommandError(f"{what} is empty; give some words to compare")
    check_bounds(args, {**TEXT_BOUNDS, **COMPARE_BOUNDS})
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
        "a": heads_json(record_a),
        "b": heads_json(record_b),
        "diff": [
            {
                "layer": int(row["layer"]),
                "head": int(row["head"]),
                **{c: _finite(row[c]) for c in comparison.statistics},
            }
            for row in diff
        ],
        "jsd": [
            {
                "layer": int(row["layer"]),
                "head": int(row["head"]),
                "jsd": _finite(row["jsd"]),
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


ROW_PROBLEMS = ("fully_masked_row", "missing_self")  # counted in query rows, not cells


def ascii_int(text: str) -> int:
    """--q-len and --offset: a whole number in ASCII digits, signed or not; ValueError else (``int()`` also
    reads "٣", an Arabic-Indic three, and "1_0")."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not ascii_digits(digits):
        raise ValueError(text)
    return int(text)


ascii_int.__name__ = "int"  # argparse says "invalid int value: '٣'", as it does for any other non-number


def mask_report(loaded: LoadedMask, diagnosis: Diagnosis, convention_line: str, expect: str | None) -> str:
    """The readable mask-doctor report: what was read, one line per problem with its examples, the notes.

    Queries are named by their position, as the messages name them: a step's row q is the query at
    ``offset + q`` (``--json`` gives the mask's own [row, column] and the offset)."""
    dtype = str(loaded.mask.dtype).removeprefix("torch.")
    batched = len(diagnosis.shape) == 3
    shift = diagnosis.offset or 0
    lines = [f"{loaded.name}: {dtype} {tuple(diagnosis.shape)} (stored as {loaded.stored_dtype})"]
    lines.append(f"convention: {convention_line}")
    lines.append(f"expected: {expect or 'nothing stated (structural checks only)'}")
    for problem in diagnosis.problems:
        unit = "rows" if problem.kind in ROW_PROBLEMS else "cells"
        count = "" if problem.kind == "bad_shape" else f" ({problem.count:,} {unit})"
        lines.append(f"PROBLEM {problem.kind}{count}: {problem.message}")
        if problem.examples:
            shown = [
                f"{b}:[{q + shift}, {k}]" if batched else f"[{q + shift}, {k}]"
                for b, (q, k) in zip(problem.batch_examples, problem.examples, strict=True)
            ]
            label = "sequence:[q, k]" if batched else "[q, k]"
            lines.append(f"  examples {label}: " + " ".join(shown))
        if "documents" in problem.extra:  # cross_document: each example's query and key documents
            lines.append("  documents (query→key): " + " ".join(f"{dq}→{dk}" for dq, dk in problem.extra["documents"]))
    lines += [f"note: {note}" for note in (*loaded.notes, *diagnosis.notes)]
    lines.append("ok: no problems found" if diagnosis.ok else f"{len(diagnosis.problems)} kind(s) of problem found")
    return "\n".join(lines)


def mask_doctor_command(args: argparse.Namespace) -> int:
    """Read a mask file safely and say what is wrong with it: exit 0 clean, 1 problems, 2 unreadable or bad input."""
    try:
        expect = parse_expect(args.expect) if args.expect is not None else None
        lengths = parse_lengths(args.lengths) if args.lengths is not None else None
        loaded = read_mask_file(args.file)  # MaskFileError, a ValueError, for anything unsafe or unreadable
    except ValueError as err:
        raise CommandError(str(err)) from err
    floating = loaded.mask.dtype.is_floating_point
    if floating and args.convention is not None:
        raise CommandError("a float mask is additive; --convention applies to bool masks")
    convention = None if floating else (args.convention or "keep")
    try:
        diagnosis = diagnose(
            loaded.mask,
            convention=convention,
            expect=expect,
            lengths=lengths,
            side=args.side,
            q_len=args.q_len,
            offset=args.offset,
        )
    except ValueError as err:
        raise CommandError(str(err)) from err
    if args.json:
        out.json(diagnosis.to_json(), indent=2)
    else:
        line = diagnosis.convention_reason
        if not floating and args.convention is None:
            line = (
                "keep, the default for a bool mask: True = may attend (--convention block if True marks blocked keys)"
            )
        out.line(mask_report(loaded, diagnosis, line, args.expect and str(expect)))
    if not diagnosis.ok:
        raise CheckFailedError("problems found: " + ", ".join(p.kind for p in diagnosis.problems))
    return 0


def _size(n: int | None) -> str:
    return "n/a" if n is None else f"{n:,} B ({n / 2**20:,.1f} MiB)"


class _Working:
    """One transient line on stderr while kv-cache reads a config and measures transformers' cache (a second or
    two, mostly importing transformers' modeling code), erased before the answer; nothing unless stderr is a
    terminal, so pipes, files and --json see exactly what they saw before."""

    def __init__(self, text: str) -> None:
        self.shown = sys.stderr.isatty()
        self.text = text

    def __enter__(self) -> None:
        if self.shown:
            sys.stderr.write(self.text)
            sys.stderr.flush()

    def __exit__(self, *exc) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def kv_cache_command(args: argparse.Namespace) -> int:
    """The KV cache a model config needs: exit 0, or 2 with one line for an unreadable or unusable config."""
    from attnviz.errors import ConfigError
    from attnviz.labs.kv.config import load_config
    from attnviz.labs.kv.engines import engine_estimates
    from attnviz.labs.kv.memory import estimate, kind_counts

    try:
        with _Working("attnviz kv-cache: reading the config and measuring transformers' cache..."):
            cfg = load_config(args.config)
            default = min(settings.KV_DEFAULT_SEQ_LEN, cfg.max_positions or settings.KV_DEFAULT_SEQ_LEN)
            seq_len = default if args.seq_len is None else args.seq_len
            result = estimate(cfg, args.batch, seq_len, args.dtype, block_size=args.block_size)
            # --json prints no engine, so transformers' cache is not measured for it (estimate checks the same input)
            engines = [] if args.json else engine_estimates(cfg, args.batch, seq_len, args.dtype)
    except (ConfigError, ValueError) as err:
        raise CommandError(str(err)) from err
    if args.json:
        out.json(
            {
                "attention": cfg.attention,
                "layers": cfg.n_layer,
                "kv_heads": cfg.n_kv_head,
                "head_dim": cfg.head_dim,
                "bytes_per_token": result.bytes_per_token,
                "total_bytes": result.total_bytes,
                "per_layer": result.per_layer,
                "window": cfg.window,
            }
        )
        return 0
    kinds = ", ".join(f"{count} {kind}" for kind, count in kind_counts(cfg).items())
    block = f", blocks of {args.block_size}" if args.block_size else ""
    out.line(f"{cfg.name}: {cfg.attention.upper()}, {cfg.n_layer} layers ({kinds}), {cfg.n_head} query heads")
    if cfg.attention == "mla":
        out.line(f"latent per token and layer: {cfg.kv_lora_rank} + rope {cfg.qk_rope_head_dim}")
    else:
        out.line(f"kv heads {cfg.n_kv_head} x head_dim {cfg.head_dim}, window {cfg.window or 'none'}")
    out.line(f"batch {args.batch} x seq_len {seq_len:,}, cache dtype {args.dtype}{block}")
    out.line(f"bytes per token (all layers, no window): {result.bytes_per_token:,}")
    out.line(f"minimum cache: {_size(result.total_bytes)}")
    for kind, size in result.per_kind.items():
        out.line(f"  {kind:8s} {_size(size)}")
    out.line("what engines allocate:")
    for figure in engines:
        out.line(f"  {figure.engine:26s} {_size(figure.total_bytes)}")
        out.line(f"    {figure.rule} ({figure.source})")
    for note in cfg.notes:
        out.line(f"note: {note}")
    return 0


def bench_command(args: argparse.Namespace) -> int:
    """The benchmarks that need no browser: attention paths, and the capture against a plain forward."""
    from attnviz.labs.cost.capture_bench import capture_benchmark
    from attnviz.labs.cost.sdpa_bench import describe_setup, run_benchmark

    check_bounds(args, BENCH_BOUNDS)
    rows = []
    if "sdpa" in args.suite:
        rows += [{"suite": "sdpa", **row} for row in run_benchmark(tokens=args.sdpa_tokens, memory=not args.no_memory)]
    if "capture" in args.suite:
        rows += [{"suite": "capture", **row} for row in capture_benchmark(args.capture_tokens, threads=args.threads)]
    if args.json:
        out.json({"setup": describe_setup(), "rows": rows}, indent=2)
    else:
        for row in rows:
            out.json(row)
    return 0


def add_text_and_model_arguments(command: argparse.ArgumentParser) -> None:
    """The text, the model and the embedded model's sizes: what every per-text command reads."""
    command.add_argument("text", help="the text to analyse")
    command.add_argument("--json", action="store_true", help="print a JSON object")
    command.add_argument(
        "--model", default="default", help="default (embedded), minilm, smollm2, or a local model folder / hub id"
    )
    command.add_argument(
        "--allow-pickle",
        action="store_true",
        help="allow a local model whose weights are pickled (*.bin); trust it first",
    )
    command.add_argument("--quiet", action="store_true", help="no loading progress on stderr")
    command.add_argument(
        "--over-budget",
        action="store_true",
        help="run a request over the request budget (tokens x layers x heads > "
        f"{settings.REQUEST_HEAD_TOKENS:,}, SmolLM2 at 8,192 tokens) instead of exiting 2 with its cost",
    )
    command.add_argument("--max-tokens", type=int, default=settings.MAX_TOKENS.default)
    command.add_argument("--device", choices=DEVICE_CHOICES, default="auto")
    command.add_argument("--d-model", type=int, default=settings.D_MODEL.default)
    command.add_argument("--n-head", type=int, default=settings.N_HEAD.default)
    command.add_argument("--n-kv-head", type=int, default=None)
    command.add_argument("--n-layer", type=int, default=settings.N_LAYER.default)
    command.add_argument("--seed", type=int, default=settings.SEED.default)
    command.add_argument("--causal", action="store_true", help="decoder-style causal mask")


def one_line_errors(parser: argparse.ArgumentParser, command: str) -> None:
    """Bad arguments to ``command`` as one line on stderr and exit 2, like every other error it reports."""

    def error(message: str) -> NoReturn:
        prefix = f"attnviz {command}" if command else "attnviz"
        parser.exit(2, printable(f"{prefix}: error: {message}") + "\n")  # the message may quote what was typed

    parser.error = error


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m attnviz", description="See what multi-head attention does to text."
    )
    parser.add_argument("--version", action="version", version=f"attnviz {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    heads = sub.add_parser("heads", help="per-head attention statistics for a text")
    add_text_and_model_arguments(heads)
    heads.add_argument("--parity", action="store_true", help="also run our attention on the model's layers and compare")
    heads.set_defaults(func=heads_command, parser=heads)

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
    compare.add_argument("--seed-b", type=int, default=None, help="the embedded model B's seed (default: --seed)")
    compare.add_argument(
        "--mask-b", choices=["causal", "bidirectional"], default=None, help="B: the embedded model under this mask"
    )
    compare.set_defaults(func=compare_command, parser=compare)

    scaling = sub.add_parser("scaling", help="every head's softmax entropy under 1/√d_k, no scale and 1/√d_model")
    add_text_and_model_arguments(scaling)
    scaling.add_argument("--threshold", type=float, default=SATURATED, help="a row is saturated at this max weight")
    scaling.set_defaults(func=scaling_command, parser=scaling)

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

    train = sub.add_parser("train-scale", help="train a small attention model under 1/√d_k, no scale and 1/√d_model")
    train.add_argument("--steps", type=int, default=None, help=f"steps per run (default {TrainingConfig().steps})")
    train.add_argument("--seed", type=int, default=None, help="seed of the weights and the data (default 0)")
    train.add_argument("--json", action="store_true", help="print a JSON object")
    train.set_defaults(func=train_scale_command, parser=train)

    doctor = sub.add_parser("mask-doctor", help="check an attention mask file (.npy, .pt, .safetensors, .csv)")
    doctor.add_argument(
        "file",
        help="the mask: (T, T), (q_len, k_len) for a decode step or chunk over a KV cache, or (B, ...) for a batch;"
        " read without running any code in it",
    )
    doctor.add_argument(
        "--expect",
        default=None,
        help="what it should be: causal, padding, causal+padding, sliding:W, prefix:P, documents:L1,L2,..."
        " (packed documents, block-diagonal causal) or bidirectional-documents:L1,L2,... (an encoder's)",
    )
    doctor.add_argument(
        "--q-len",
        type=ascii_int,
        default=None,
        help="query rows in the mask (1: a (1, T) mask is a decode step, not a key mask)",
    )
    doctor.add_argument(
        "--offset",
        type=ascii_int,
        default=None,
        help="position of the first query (tokens in the KV cache; default k_len - q_len, aligned bottom-right)",
    )
    doctor.add_argument("--lengths", default=None, help="each sequence's real length, e.g. 5,3 (for a batch)")
    doctor.add_argument("--side", choices=["right", "left"], default="right", help="where the pads go")
    doctor.add_argument(
        "--convention", choices=["keep", "block"], default=None, help="a bool mask's True: may attend (keep, default)"
    )
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    doctor.set_defaults(func=mask_doctor_command, parser=doctor)

    kv = sub.add_parser("kv-cache", help="the KV cache a model config needs, exactly, and what engines allocate")
    kv.add_argument("config", metavar="CONFIG_OR_DIR", help="a config.json, a model folder, minilm or smollm2")
    kv.add_argument(
        "--seq-len",
        type=int,
        default=None,
        help=f"tokens per sequence (default {settings.KV_DEFAULT_SEQ_LEN}, capped at the model's max positions)",
    )
    kv.add_argument("--batch", type=int, default=1, help="sequences (default 1)")
    kv.add_argument("--dtype", choices=KV_DTYPES, default="bf16", help="cache dtype (default bf16)")
    kv.add_argument("--block-size", type=int, default=None, help="round each sequence up to blocks of K tokens")
    kv.add_argument("--json", action="store_true", help="print one JSON object")
    kv.set_defaults(func=kv_cache_command, parser=kv)

    bench = sub.add_parser("bench", help="benchmarks: attention paths, and the capture against a plain forward")
    bench.add_argument("--json", action="store_true", help="print one JSON object")
    bench.add_argument("--suite", nargs="+", choices=["sdpa", "capture"], default=["sdpa", "capture"])
    bench.add_argument("--sdpa-tokens", type=int, nargs="+", default=[512, 2048, 4096])
    bench.add_argument("--capture-tokens", type=int, nargs="+", default=[2048, 8192])
    bench.add_argument("--threads", type=int, default=1, help="intra-op threads for the capture suite")
    bench.add_argument("--no-memory", action="store_true", help="skip the sdpa suite's memory runs")
    bench.set_defaults(func=bench_command, parser=bench)
    one_line_errors(parser, "")
    for name, command in sub.choices.items():
        one_line_errors(command, name)  # every error one line on stderr, as other programs read it
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    out.escaped = False
    if not stdout_is_unicode() and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")  # --help's √ and anything else printed outside Output
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # as parse_args does, but from the subcommand's parser when it has its own error format
        getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        commands = ",".join(next(a for a in parser._actions if a.dest == "command").choices)
        print(f"attnviz: error: no command given; usage: {parser.prog} {{{commands}}} ... (or --help)", file=sys.stderr)
        return 2
    try:
        code = args.func(args)
        out.notice(args.command)
        return code
    except BrokenPipeError:  # `... | head` closed the pipe: not an error
        sys.stderr.close()
        return 0
    except CommandError as err:  # its text names the user's paths and values: printable keeps it one line
        print(printable(f"attnviz {args.command}: error: {err}"), file=sys.stderr)
        return 2
    except OSError as err:  # a path no library check caught: still one line, naming the reason
        print(printable(f"attnviz {args.command}: error: {first_line(err)}"), file=sys.stderr)
        return 2
    except CheckFailedError as err:
        out.notice(args.command)
        print(printable(f"attnviz {args.command}: {err}"), file=sys.stderr)
        return 1

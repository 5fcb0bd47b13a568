"""``attnviz corpus``: every head's statistics over a corpus file, written to a run folder as it goes
(:mod:`attnviz.labs.corpus`); stoppable with Ctrl-C or SIGTERM after the current batch, resumable with --resume,
spread over a Ray cluster with --ray.

Its torch-backed imports are inside :func:`corpus_command`, after the checks (why: :mod:`attnviz.cli`)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from attnviz import settings
from attnviz.cli.arguments import add_model_arguments, add_model_sizes, integer
from attnviz.cli.checks import TEXT_BOUNDS, CommandError, check_bounds
from attnviz.cli.output import out
from attnviz.core.files import printable
from attnviz.errors import ModelUnavailableError
from attnviz.labs.corpus import DEFAULT_BATCH_TOKENS
from attnviz.labs.corpus.readers import FORMATS, read_texts

STOPPED_EXIT = 130  # as a shell reports a command ended by Ctrl-C: the run stopped early, its parts kept


def _check_folder(args: argparse.Namespace) -> None:
    """The run folder as far as it can be judged before the model loads (its run.json is compared after)."""
    folder = Path(args.out)
    if folder.exists() and not folder.is_dir():
        raise CommandError(f"--out {folder} is a file, not a folder")
    if folder.is_dir() and any(folder.iterdir()):
        if not args.resume:
            raise CommandError(
                f"{folder} is not empty; pass --resume to go on with the run there, or give a new folder"
            )
        if not (folder / "run.json").is_file():
            raise CommandError(f"{folder} holds no corpus run (no run.json); give an empty or new folder")


def _progress_line(update) -> str:
    of = f" of {update.texts_total:,}" if update.texts_total is not None else ""
    if update.seconds_left is None:
        left = "time left not known yet"
    elif update.seconds_left < 90:
        left = f"about {update.seconds_left:,.0f} s left"
    elif update.seconds_left < 5400:
        left = f"about {update.seconds_left / 60:,.0f} min left"
    else:
        left = f"about {update.seconds_left / 3600:,.1f} h left"
    return (
        f"[corpus] {update.texts_done:,} texts{of}, {update.tokens_done:,} tokens, "
        f"{update.tokens_per_s:,.0f} tokens/s, {left}"
    )


class _StopSignal:
    """SIGINT and SIGTERM, while a run is on, ask it to stop after the current batch (a second one: at once); the
    handlers before are put back."""

    def __init__(self) -> None:
        self.asked = False
        self._before: dict = {}

    def __enter__(self) -> _StopSignal:
        for number in (signal.SIGINT, signal.SIGTERM):
            self._before[number] = signal.signal(number, self._ask)
        return self

    def _ask(self, number, frame) -> None:
        if self.asked:  # asked twice: now, without the batch that runs (its part is never half written)
            print("attnviz corpus: stopped at once; --resume runs the unfinished batch again", file=sys.stderr)
            os._exit(STOPPED_EXIT)
        self.asked = True

    def __exit__(self, *exc) -> None:
        for number, handler in self._before.items():
            signal.signal(number, handler)


def _executor(args: argparse.Namespace):
    """--ray's executor (attnviz.labs.corpus.ray_run, imported only here) and the model spec every actor opens."""
    from attnviz.cli.loading import placement_of
    from attnviz.labs.corpus.ray_run import RayExecutor
    from attnviz.models.registry import EMBEDDED, SourceSpec, embedded_spec

    # --device as given ("auto" too): each actor places the model on its own node, which the driver may not resemble
    device, placement = args.device, placement_of(args)
    if args.model == EMBEDDED:
        sizes = {name: getattr(args, name) for name in ("d_model", "n_head", "n_kv_head", "n_layer", "causal")}
        spec = embedded_spec(device, seed=args.seed, dtype=placement.dtype, **sizes)
    else:
        spec = SourceSpec(args.model, device, allow_pickle=args.allow_pickle, placement=placement)
    return RayExecutor(args.ray, spec, max_tokens=args.max_tokens)


def corpus_command(args: argparse.Namespace) -> int:
    check_bounds(args, TEXT_BOUNDS)
    if args.limit is not None and args.limit < 1:
        raise CommandError(f"--limit must be 1 or more, not {args.limit}")
    if args.batch_tokens < 1:
        raise CommandError(f"--batch-tokens must be 1 or more, not {args.batch_tokens}")
    try:
        read_texts(args.file, args.format)  # the file's format and column, checked before the model loads
    except ValueError as err:
        raise CommandError(str(err)) from err
    _check_folder(args)
    from attnviz.labs.corpus.run import run_corpus

    source = executor = None
    try:
        if args.ray:
            executor = _executor(args)
        else:
            from attnviz.cli.loading import load_cli_source

            source = load_cli_source(args)
        with _StopSignal() as stop:
            report = run_corpus(
                source,
                args.file,
                args.out,
                max_tokens=args.max_tokens,
                limit=args.limit,
                resume=args.resume,
                batch_tokens=args.batch_tokens,
                progress=None if args.quiet else lambda u: print(printable(_progress_line(u)), file=sys.stderr),
                should_stop=lambda: stop.asked,
                executor=executor,
                fmt=args.format,
            )
    except (ValueError, ModelUnavailableError) as err:
        raise CommandError(str(err)) from err
    finally:
        if executor is not None:
            executor.close()
    result = {
        "out": str(report.out_dir),
        "model": report.model,
        "texts_done": report.texts_done,
        "texts_total": report.texts_total,
        "tokens_done": report.tokens_done,
        "seconds": round(report.seconds, 3),
        "stopped": report.stopped,
        "routes": report.routes,
    }
    if args.json:
        out.json(result)
    else:
        out.line(
            f"{report.model}: {report.texts_done:,} texts, {report.tokens_done:,} tokens in {report.seconds:,.1f} s; "
            f"{Path(args.out) / 'summary.json'}"
        )
    if report.stopped:
        print(
            printable(f"attnviz corpus: stopped after {report.texts_done:,} texts; --resume goes on from there"),
            file=sys.stderr,
        )
        return STOPPED_EXIT
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """``corpus``: the file, the run folder, --limit, --resume, --ray, and the model flags of a per-text command."""
    corpus = sub.add_parser("corpus", help="every head's statistics over a corpus file, into a run folder")
    corpus.add_argument(
        "file", help="one text a line (or paragraphs between blank lines), JSONL or CSV with a text column, or Parquet"
    )
    corpus.add_argument(
        "--out", required=True, metavar="DIR", help="the run folder (new or empty; --resume: this run's)"
    )
    corpus.add_argument("--format", choices=FORMATS, default=None, help="the file's format (default: from its suffix)")
    corpus.add_argument("--limit", type=integer, metavar="K", help="only the first K texts")
    corpus.add_argument("--resume", action="store_true", help="go on with the run in DIR, skipping the texts done")
    corpus.add_argument(
        "--batch-tokens",
        type=integer,
        default=DEFAULT_BATCH_TOKENS,
        metavar="N",
        help=f"a batch's padded tokens, texts x the longest ({DEFAULT_BATCH_TOKENS:,} by default)",
    )
    corpus.add_argument("--ray", metavar="ADDRESS", help="spread the batches over the Ray cluster at ADDRESS (or auto)")
    corpus.add_argument("--json", action="store_true", help="print a JSON object at the end")
    add_model_arguments(corpus, quiet="no loading or run progress on stderr")
    corpus.add_argument("--max-tokens", type=integer, default=settings.MAX_TOKENS.default, help="each text cut to N")
    add_model_sizes(corpus)
    corpus.set_defaults(func=corpus_command, parser=corpus)

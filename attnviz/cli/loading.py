"""The model a per-text command reads: its flags (the text, --model, the embedded model's sizes), loading it
with its progress on stderr, and its capture of the text within the request budget."""

from __future__ import annotations

import argparse
import sys

from attnviz import settings
from attnviz.cli.checks import TEXT_BOUNDS, CommandError, check_bounds, check_budget, check_text
from attnviz.core.devices import DEVICE_CHOICES, resolve_device
from attnviz.core.files import printable
from attnviz.errors import ModelUnavailableError
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.record import AttentionRecord
from attnviz.models.registry import EMBEDDED, SourceSpec, open_source
from attnviz.models.source import AttentionSource


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

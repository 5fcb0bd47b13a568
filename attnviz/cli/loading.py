"""The model a per-text command reads: loading it with its progress on stderr, and its capture of the text within
the request budget. It imports torch and the model code, so a command imports it only when it runs, after the checks
that need no model (its flags are in :mod:`attnviz.cli.arguments`)."""

from __future__ import annotations

import argparse
import sys

from attnviz.cli.checks import CommandError, check_budget
from attnviz.core.devices import Placement, resolve_device
from attnviz.core.files import printable
from attnviz.errors import ModelUnavailableError
from attnviz.i18n.message import msg
from attnviz.models.record import AttentionRecord
from attnviz.models.registry import EMBEDDED, SourceSpec, embedded_spec, open_source
from attnviz.models.source import AttentionSource


def quiet_libraries(progress_bars: bool) -> None:
    """transformers' and huggingface_hub's warnings off (attnviz reports problems itself, in one line), and
    their progress bars too unless ``progress_bars``: ``--quiet`` means nothing on stderr but an error."""
    import transformers
    from huggingface_hub.utils import disable_progress_bars

    transformers.logging.set_verbosity_error()
    if not progress_bars:
        transformers.logging.disable_progress_bar()
        disable_progress_bars()


def placement_of(args: argparse.Namespace) -> Placement:
    """--dtype, --device-map, --max-memory and --offload-folder as one :class:`Placement`; ValueError (one line)
    for caps or a folder without a device map."""
    return Placement(args.dtype, args.device_map, args.max_memory, args.offload_folder)


def load_cli_source(args: argparse.Namespace) -> AttentionSource:
    """The model named by --model: "default" (embedded, sized by the flags), "minilm", "smollm2" or a path, on
    --device in --dtype (a model larger than one device spread by --device-map)."""
    device = resolve_device(args.device)
    placement = placement_of(args)
    if args.model == EMBEDDED:
        if placement.device_map is not None:
            raise ValueError(msg("bounds.embedded_device_map"))
        sizes = {name: getattr(args, name) for name in ("d_model", "n_head", "n_kv_head", "n_layer", "causal")}
        spec = embedded_spec(device, seed=args.seed, dtype=placement.dtype, **sizes)
    else:
        quiet_libraries(progress_bars=not args.quiet)
        spec = SourceSpec(args.model, device, allow_pickle=args.allow_pickle, placement=placement)
    progress = (
        (lambda fraction, message: print(printable(f"[{fraction:4.0%}] {message}"), file=sys.stderr))
        if not args.quiet
        else None
    )  # the message names the user's --model: a newline or an ANSI escape in it is shown, never obeyed
    return open_source(spec, progress=progress)


def capture_for(
    args: argparse.Namespace, keep_qk: bool, source: AttentionSource | None = None
) -> tuple[AttentionSource, AttentionRecord]:
    """The source --model names (or ``source``, already loaded) and its capture of the text, within the request
    budget unless --over-budget; CommandError for any bad input (the text and the numbers are the caller's to
    check first, with :func:`~attnviz.cli.checks.check_text_arguments`)."""
    try:
        source = source or load_cli_source(args)
        check_budget(source, args)
        return source, source.run(args.text, args.max_tokens, keep_qk=keep_qk)
    except (ValueError, ModelUnavailableError) as err:
        raise CommandError(str(err)) from err

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

LIBRARIES = ("transformers", "accelerate", "huggingface_hub")
DISK_NOTE = "placement.on_disk"  # the loader's message on a model a device map left (partly) on disk


def quiet_libraries() -> None:
    """transformers', accelerate's and huggingface_hub's warnings and progress bars off: attnviz says on stderr
    what loading does (its own progress lines, unless ``--quiet``) and reports problems itself, in one line, so
    stderr is what docs/cli.md promises ("Loading weights" bars and "Some parameters are on the meta device" are
    not)."""
    import logging
    import warnings

    import transformers
    from huggingface_hub.utils import disable_progress_bars
    from huggingface_hub.utils import logging as hub_logging

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    hub_logging.set_verbosity_error()
    disable_progress_bars()
    logging.getLogger("accelerate").setLevel(logging.ERROR)  # its loggers are plain ones under "accelerate"
    warnings.filterwarnings("ignore", module=rf"({'|'.join(LIBRARIES)})(\.|$)")


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
        quiet_libraries()
        spec = SourceSpec(args.model, device, allow_pickle=args.allow_pickle, placement=placement)
    if args.quiet:
        return open_source(spec)
    return open_source(
        spec, progress=lambda fraction, message: print(progress_line(args, fraction, message), file=sys.stderr)
    )


def progress_line(args: argparse.Namespace, fraction: float, message) -> str:
    """A loading progress line for stderr ("[ 90%] Loading llama"); the loader's note on what a device map left on
    disk as a note of the command's. The message names the user's --model: a newline or an ANSI escape in it is
    shown, never obeyed."""
    if getattr(message, "key", None) == DISK_NOTE:
        return printable(f"attnviz {args.command}: note: {message}")
    return printable(f"[{fraction:4.0%}] {message}")


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

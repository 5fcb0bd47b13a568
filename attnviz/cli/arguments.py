"""The flags every per-text command reads (``heads``, ``compare``, ``scaling``, ``ablate``): the text, the model
and the embedded model's sizes. Built from settings alone, without torch, as the whole parser is: ``--help`` and
a mistyped flag answer at once."""

from __future__ import annotations

import argparse

from attnviz import settings
from attnviz.core.devices import (
    DEVICE_CHOICES,
    DEVICE_MAP_CHOICES,
    DTYPE_CHOICES,
    check_device_choice,
    parse_max_memory,
)
from attnviz.core.typed_numbers import typed_int


def integer(text: str) -> int:
    """Every whole-number option's type: ASCII digits, at most a leading "-" (:func:`typed_int`); ``int()`` also
    reads "+5", " 5", "1_000" and "٥" (an Arabic-Indic five), which ``--heads`` and every page refuse."""
    return typed_int(text)


integer.__name__ = "int"  # argparse says "invalid int value: '٥'", as it does for any other non-number


def device_choice(text: str) -> str:
    """--device's type: a device kind ("cuda:1" too), refused by argparse in one line otherwise."""
    try:
        return check_device_choice(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def _max_memory(text: str) -> tuple[tuple[str, int], ...]:
    try:
        return parse_max_memory(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def add_placement_arguments(command: argparse.ArgumentParser) -> None:
    """Where the model runs and in what dtype: --device, --dtype, and for a model larger than one device
    --device-map, --max-memory and --offload-folder (accelerate spreads it over the GPUs, the CPU and disk)."""
    command.add_argument(
        "--device",
        type=device_choice,
        default="auto",
        metavar="{" + ",".join((*DEVICE_CHOICES, "cuda:N")) + "}",
        help="where the model runs (auto: the first GPU, then Apple MPS, then the CPU)",
    )
    command.add_argument(
        "--dtype",
        choices=DTYPE_CHOICES,
        default="auto",
        help="the model's dtype (auto: the checkpoint's own on a GPU, float32 on a CPU where it fits); "
        "softmax and every statistic are computed in float32 whatever it is",
    )
    command.add_argument(
        "--device-map",
        choices=DEVICE_MAP_CHOICES,
        default=None,
        help="spread a model larger than one device over the GPUs, then the CPU, then disk (through accelerate)",
    )
    command.add_argument(
        "--max-memory",
        type=_max_memory,
        default=(),
        metavar="DEVICE=SIZE,...",
        help="with --device-map: the most each device may hold, e.g. 0=20GiB,1=20GiB,cpu=64GiB",
    )
    command.add_argument(
        "--offload-folder", default=None, metavar="FOLDER", help="with --device-map: where weights offloaded to disk go"
    )


def add_model_arguments(command: argparse.ArgumentParser, quiet: str = "no loading progress on stderr") -> None:
    """Which model: --model, --allow-pickle, and --quiet (``quiet``: what it silences)."""
    command.add_argument(
        "--model", default="default", help="default (embedded), minilm, smollm2, or a local model folder / hub id"
    )
    command.add_argument(
        "--allow-pickle",
        action="store_true",
        help="allow a local model whose weights are pickled (*.bin); trust it first",
    )
    command.add_argument("--quiet", action="store_true", help=quiet)


def add_model_sizes(command: argparse.ArgumentParser) -> None:
    """Where the model runs (:func:`add_placement_arguments`) and the embedded model's sizes."""
    add_placement_arguments(command)
    command.add_argument("--d-model", type=integer, default=settings.D_MODEL.default)
    command.add_argument("--n-head", type=integer, default=settings.N_HEAD.default)
    command.add_argument("--n-kv-head", type=integer, default=None)
    command.add_argument("--n-layer", type=integer, default=settings.N_LAYER.default)
    command.add_argument("--seed", type=integer, default=settings.SEED.default)
    command.add_argument("--causal", action="store_true", help="decoder-style causal mask")


def add_text_and_model_arguments(command: argparse.ArgumentParser) -> None:
    """The text, the model and the embedded model's sizes: what every per-text command reads."""
    command.add_argument("text", help="the text to analyse")
    command.add_argument("--json", action="store_true", help="print a JSON object")
    add_model_arguments(command)
    command.add_argument(
        "--over-budget",
        action="store_true",
        help="run a request over the request budget (tokens x layers x heads > "
        f"{settings.REQUEST_HEAD_TOKENS:,}, SmolLM2 at 8,192 tokens) instead of exiting 2 with its cost",
    )
    command.add_argument("--max-tokens", type=integer, default=settings.MAX_TOKENS.default)
    add_model_sizes(command)

"""The flags every per-text command reads (``heads``, ``compare``, ``scaling``, ``ablate``): the text, the model
and the embedded model's sizes. Built from settings alone, without torch, as the whole parser is: ``--help`` and
a mistyped flag answer at once."""

from __future__ import annotations

import argparse

from attnviz import settings
from attnviz.core.devices import DEVICE_CHOICES


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

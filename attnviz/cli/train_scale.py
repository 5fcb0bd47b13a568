"""``attnviz train-scale``: train a small attention model under 1/√d_k, no scale and 1/√d_model.

Its torch-backed imports are inside :func:`train_scale_command` (why: :mod:`attnviz.cli`)."""

from __future__ import annotations

import argparse

from attnviz import settings
from attnviz.cli.arguments import device_choice, integer
from attnviz.cli.checks import CommandError
from attnviz.cli.output import out
from attnviz.core.devices import DEVICE_CHOICES


def train_scale_command(args: argparse.Namespace) -> int:
    """Three identical runs but for the scale on the scores: the tutorial's "loss stuck", measured."""
    from attnviz.core.devices import resolve_device
    from attnviz.labs.training.report import results_table, runs_as_json
    from attnviz.labs.training.runs import TrainingConfig, train_scale

    try:
        config = TrainingConfig(device=resolve_device(args.device))
        results = train_scale(config, steps=args.steps, seed=args.seed)
    except ValueError as err:
        raise CommandError(str(err)) from err
    if args.json:
        out.json(runs_as_json(results), indent=2)
        return 0
    out.line(results_table(results).to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """``train-scale``: --steps, --seed, --json."""
    train = sub.add_parser("train-scale", help="train a small attention model under 1/√d_k, no scale and 1/√d_model")
    train.add_argument(
        "--steps", type=integer, default=None, help=f"steps per run (default {settings.TRAIN_STEPS.default})"
    )
    train.add_argument("--seed", type=integer, default=None, help="seed of the weights and the data (default 0)")
    train.add_argument("--json", action="store_true", help="print a JSON object")
    train.add_argument(
        "--device",
        type=device_choice,
        default="cpu",
        metavar="{" + ",".join((*DEVICE_CHOICES, "cuda:N")) + "}",
        help="where the three runs train (default cpu: the page's figures; auto takes the first GPU)",
    )
    train.set_defaults(func=train_scale_command, parser=train)

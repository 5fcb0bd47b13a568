"""``attnviz train-scale``: train a small attention model under 1/√d_k, no scale and 1/√d_model.

Its torch-backed imports are inside :func:`train_scale_command` (why: :mod:`attnviz.cli`)."""

from __future__ import annotations

import argparse

from attnviz import settings
from attnviz.cli.checks import CommandError
from attnviz.cli.output import out


def train_scale_command(args: argparse.Namespace) -> int:
    """Three identical runs but for the scale on the scores: the tutorial's "loss stuck", measured."""
    from attnviz.labs.training.report import results_table, runs_as_json
    from attnviz.labs.training.runs import train_scale

    try:
        results = train_scale(steps=args.steps, seed=args.seed)
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
        "--steps", type=int, default=None, help=f"steps per run (default {settings.TRAIN_STEPS.default})"
    )
    train.add_argument("--seed", type=int, default=None, help="seed of the weights and the data (default 0)")
    train.add_argument("--json", action="store_true", help="print a JSON object")
    train.set_defaults(func=train_scale_command, parser=train)

"""The Training page's runs in words and numbers: the ``train-scale --json`` object, the results table, and what
the runs show, said with the numbers of the run the user trained.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from attnviz.i18n.message import Message, msg
from attnviz.labs.scaling import SCALE_TITLES
from attnviz.labs.training.runs import TARGET, RunResult, TrainingConfig


def _finite(value: float) -> float | None:
    """A float for JSON: rounded to six decimal places, as the CLI does; None for NaN or ±inf (a diverged run)."""
    return round(float(value), 6) if math.isfinite(value) else None


def runs_as_json(results: Sequence[RunResult]) -> dict:
    """The ``train-scale --json`` contract, exactly: ``{"runs": [...]}``, one object per variant.

    Each run: ``scale`` ("sqrt_dk", "none" or "sqrt_dmodel"), ``final_loss`` and
    ``final_accuracy`` (on held-out sequences, after the last step), ``losses`` (one
    per step taken, on that step's fresh batch before its update) and ``seconds``.
    A non-finite number (a diverged run) is null.
    """
    return {
        "runs": [
            {
                "scale": r.scale,
                "final_loss": _finite(r.final_loss),
                "final_accuracy": _finite(r.final_accuracy),
                "losses": [_finite(x) for x in r.losses],
                "seconds": round(r.seconds, 3),
            }
            for r in results
        ]
    }


def results_table(results: Sequence[RunResult]) -> pd.DataFrame:
    """One row per run: its scale, held-out loss and accuracy, when it learned, and where its attention went.

    stuck rows: ``AttentionSummary.wrong_saturated`` after the last step.
    """
    table = pd.DataFrame(
        [
            {
                "scale": SCALE_TITLES[r.scale],
                "factor": r.scale_value,
                "steps": r.steps_done,
                "loss": r.final_loss,
                "accuracy": r.final_accuracy,
                f"steps to {TARGET:.0%}": r.steps_to_target,
                "start: max weight": r.attention_start.max_weight,
                "end: weight on answer": r.attention_end.answer_weight,
                "stuck rows": r.attention_end.wrong_saturated,
                "seconds": r.seconds,
            }
            for r in results
        ]
    )
    return table.astype({f"steps to {TARGET:.0%}": "Int64"})  # <NA> where never reached


def clearly_worse(run: RunResult, reference: RunResult) -> bool:
    """Whether ``run`` ended measurably worse than ``reference`` on the held-out set.

    Worse means a loss over twice the reference's and at least 0.01 above it, or an
    accuracy at least 2 points lower; a diverged (non-finite) loss is worse.
    """
    if not math.isfinite(run.final_loss):
        return True
    higher_loss = run.final_loss > 2 * reference.final_loss and run.final_loss - reference.final_loss >= 0.01
    return higher_loss or run.final_accuracy <= reference.final_accuracy - 0.02


def _reached(run: RunResult) -> Message:
    step = run.steps_to_target
    if step is None:
        return msg("training_lib.never_reached", target=TARGET, steps=run.steps_done)
    return msg("training_lib.reached", target=TARGET, step=step)


def describe_runs(results: Sequence[RunResult], config: TrainingConfig) -> list[Message]:
    """What the three runs show, in a few Markdown sentences with their own numbers.

    Where a wrong scale did not end measurably worse (:func:`clearly_worse`), it says so:
    the tutorial's claim is checked, not repeated.
    """
    by_kind = {r.scale: r for r in results}
    dk, none, dm = by_kind["sqrt_dk"], by_kind["none"], by_kind["sqrt_dmodel"]
    flat = 1 / config.pairs
    notes = [
        msg(
            "training_lib.dk_note",
            factor=dk.scale_value,
            reached=_reached(dk),
            loss=dk.final_loss,
            accuracy=dk.final_accuracy,
            score_std=dk.attention_start.score_std,
            max_weight=dk.attention_start.max_weight,
            pairs=config.pairs,
            flat=flat,
        ),
    ]
    if dk.final_accuracy < TARGET:
        notes.append(msg("training_lib.dk_not_learned", steps=dk.steps_done, accuracy=dk.final_accuracy))
        return notes
    start = msg(
        "training_lib.none_start",
        score_std=none.attention_start.score_std,
        max_weight=none.attention_start.max_weight,
    )
    if clearly_worse(none, dk):
        notes.append(
            msg(
                "training_lib.none_stuck",
                start=start,
                reached=_reached(none),
                loss=none.final_loss,
                accuracy=none.final_accuracy,
                wrong=none.attention_end.wrong_saturated,
            )
        )
    else:
        notes.append(
            msg(
                "training_lib.none_small",
                start=start,
                loss=none.final_loss,
                accuracy=none.final_accuracy,
                dk_loss=dk.final_loss,
                dk_accuracy=dk.final_accuracy,
            )
        )
    if config.n_head == 1:
        notes.append(msg("training_lib.one_head"))
    else:
        start = msg(
            "training_lib.dmodel_start",
            factor=dm.scale_value,
            times=math.sqrt(config.n_head),
            max_weight=dm.attention_start.max_weight,
            reached=_reached(dm),
        )
        if clearly_worse(dm, dk):
            notes.append(msg("training_lib.dmodel_late", start=start, loss=dm.final_loss, accuracy=dm.final_accuracy))
        else:
            notes.append(msg("training_lib.dmodel_level", start=start, loss=dm.final_loss, accuracy=dm.final_accuracy))
    notes.append(msg("training_lib.sgd" if config.optimiser == "sgd" else "training_lib.adam"))
    return notes


def results_column_names() -> dict[str, Message]:
    """The header of each of :func:`results_table`'s columns (English there: the CLI prints them), for the page."""
    keys = {
        "scale": "col_scale",
        "factor": "col_factor",
        "steps": "col_steps",
        "loss": "col_loss",
        "accuracy": "col_accuracy",
        f"steps to {TARGET:.0%}": "col_steps_to",
        "start: max weight": "col_start_max",
        "end: weight on answer": "col_end_answer",
        "stuck rows": "col_stuck",
        "seconds": "col_seconds",
    }
    return {column: msg(f"training_lib.{key}", target=TARGET) for column, key in keys.items()}

"""The Training page's library: the retrieval task, the three scales, validation, determinism and the effect."""

import json
import math

from attnviz.labs.scaling import SCALE_KINDS
from attnviz.labs.training.report import describe_runs, runs_as_json
from attnviz.labs.training.runs import (
    AttentionSummary,
    RunResult,
    TrainingConfig,
    train_scale,
)


def test_with_one_head_the_d_model_bug_is_the_correct_scale():
    config = TrainingConfig(head_dim=32, n_head=1, steps=10, pairs=8, keys=16, values=4, batch=8)
    by_kind = {r.scale: r for r in train_scale(config)}
    assert by_kind["sqrt_dmodel"].losses == by_kind["sqrt_dk"].losses
    notes = describe_runs(list(by_kind.values()), config)
    assert "1/√d_k has not learned the task in 10 steps either" in str(notes[-1])


def _run(scale: str, loss: float, accuracy: float, losses=(1.0, 0.5)) -> RunResult:
    summary = AttentionSummary(0.5, 0.5, 0.0, 1.0)
    return RunResult(scale, 1.0, tuple(losses), (0.5, accuracy), loss, accuracy, 1.25, False, summary, summary)


def test_json_has_the_cli_contract_and_no_nan():
    results = [
        _run("sqrt_dk", 0.01, 1.0),
        _run("none", math.nan, 0.1, losses=(1.0, math.inf)),
        _run("sqrt_dmodel", 0.2, 0.9),
    ]
    out = runs_as_json(results)
    text = json.dumps(out, allow_nan=False)
    assert json.loads(text) == out and set(out) == {"runs"}
    assert [r["scale"] for r in out["runs"]] == list(SCALE_KINDS)
    run = out["runs"][0]
    assert set(run) == {"scale", "final_loss", "final_accuracy", "losses", "seconds"}  # the contract, exactly
    assert run["losses"] == [1.0, 0.5] and run["final_accuracy"] == 1.0 and run["seconds"] == 1.25
    assert out["runs"][1]["final_loss"] is None and out["runs"][1]["losses"] == [1.0, None]


def test_the_notes_say_when_the_effect_is_smaller_than_claimed():
    config = TrainingConfig()
    close = [_run("sqrt_dk", 0.010, 0.99), _run("none", 0.015, 0.985), _run("sqrt_dmodel", 0.012, 0.99)]
    notes = describe_runs(close, config)
    assert "smaller than the tutorial claims: it still ended at loss 0.0150, accuracy 98.5%" in str(notes[1])
    assert "smaller than the tutorial claims: it ended level with 1/√d_k" in str(notes[2])
    stuck = [_run("sqrt_dk", 0.010, 0.99), _run("none", 2.2, 0.35), _run("sqrt_dmodel", 0.05, 0.99)]
    notes = describe_runs(stuck, config)
    assert '"loss stuck"' in str(notes[1]) and "late rather than stuck" in str(notes[2])
    assert "Choose Adam" in str(notes[-1])

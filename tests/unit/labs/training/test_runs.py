"""The Training page's library: the retrieval task, the three scales, validation, determinism and the effect."""

import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from attnviz import settings
from attnviz.core.attention import scaled_dot_product_attention
from attnviz.labs.scaling import SCALE_KINDS
from attnviz.labs.training import runs as training
from attnviz.labs.training.report import clearly_worse
from attnviz.labs.training.runs import (
    TrainingConfig,
    first_step_reaching,
    max_steps,
    moving_average,
    retrieval_batch,
    scale_for,
    summarise_attention,
    train_scale,
    train_variant,
    training_macs,
)

TINY = TrainingConfig(head_dim=16, n_head=2, steps=12, pairs=6, keys=12, values=4, batch=8)

# small enough for a unit test (about 2 s for the three runs), large enough that the scale matters
SMALL = TrainingConfig(head_dim=128, n_head=2, steps=150, pairs=16, keys=64, values=8, batch=32)


def test_a_batch_holds_distinct_keys_and_the_answer_sits_at_the_query_key():
    b = retrieval_batch(64, 8, 20, 5, torch.Generator().manual_seed(0))
    assert b.keys.shape == b.values.shape == (64, 8) and b.query.shape == b.answer.shape == (64,)
    assert all(len(set(row.tolist())) == 8 for row in b.keys)
    rows = torch.arange(64)
    assert torch.equal(b.keys[rows, b.answer_position], b.query)
    assert torch.equal(b.values[rows, b.answer_position], b.answer)
    assert int(b.keys.max()) < 20 and int(b.values.max()) < 5
    assert len(b.rows(10, 20)) == 10 and torch.equal(b.rows(10, 20).query, b.query[10:20])
    with pytest.raises(ValueError, match=r"pairs \(9\) must be from 1 to the number of keys \(8\)"):
        retrieval_batch(4, 9, 8, 5, torch.Generator())


def test_attention_alone_retrieves_the_answer():
    """One-hot keys as q and k, one-hot values as v: a sharp softmax reads exactly the answer's value."""
    b = retrieval_batch(256, 16, 40, 7, torch.Generator().manual_seed(1))
    q = F.one_hot(b.query, 40).float()[:, None, None, :]  # (B, 1 head, 1 query, 40)
    k = F.one_hot(b.keys, 40).float()[:, None]  # (B, 1, pairs, 40)
    v = F.one_hot(b.values, 7).float()[:, None]  # (B, 1, pairs, 7)
    out, weights = scaled_dot_product_attention(q, k, v, scale=30.0)  # (B, 1, 1, 7), (B, 1, 1, pairs)
    assert torch.equal(out[:, 0, 0].argmax(-1), b.answer)
    summary = summarise_attention(weights, b.answer_position, q @ k.transpose(-2, -1))
    assert summary.answer_weight > 0.999 and summary.wrong_saturated == 0.0


def test_same_seed_same_data_for_every_variant():
    a = retrieval_batch(4, 3, 10, 5, torch.Generator().manual_seed(7))
    b = retrieval_batch(4, 3, 10, 5, torch.Generator().manual_seed(7))
    assert all(torch.equal(x, y) for x, y in zip(vars(a).values(), vars(b).values(), strict=True))


def test_the_scale_kinds():
    assert scale_for("sqrt_dk", 128, 512) == pytest.approx(1 / math.sqrt(128))
    assert scale_for("none", 128, 512) == 1.0
    assert scale_for("sqrt_dmodel", 128, 512) == pytest.approx(1 / math.sqrt(512))
    assert SCALE_KINDS == ("sqrt_dk", "none", "sqrt_dmodel")
    with pytest.raises(ValueError, match="'sqrt_d' must be one of sqrt_dk, none, sqrt_dmodel"):
        scale_for("sqrt_d", 128, 512)


def test_summary_of_hand_made_weights():
    weights = torch.tensor([[[0.95, 0.05, 0.0]], [[0.2, 0.3, 0.5]]])[:, :, None, :]  # (2 seqs, 1 head, 1, 3 pairs)
    summary = summarise_attention(weights, torch.tensor([1, 2]), torch.tensor([1.0, 3.0]))
    assert summary.max_weight == pytest.approx((0.95 + 0.5) / 2)
    assert summary.answer_weight == pytest.approx((0.05 + 0.5) / 2)
    assert summary.wrong_saturated == 0.5  # the first sequence is saturated on pair 0, not its answer (1)
    assert summary.score_std == pytest.approx(math.sqrt(2.0))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"head_dim": 300}, r"d_k \(300\) must be from 8 to 256"),
        ({"n_head": 9}, r"n_head \(9\) must be from 1 to 8"),
        ({"steps": 0}, r"steps \(0\) must be from 1 to 2000"),
        ({"seed": -1}, r"seed \(-1\) must be from 0"),
        ({"learning_rate": 0.0}, r"learning rate \(0.0\) must be from 1e-05 to 10"),
        ({"learning_rate": math.nan}, r"learning rate \(nan\)"),
        ({"optimiser": "rmsprop"}, r"optimiser 'rmsprop' must be one of sgd, adam"),
        ({"pairs": 40, "keys": 30}, r"keys \(30\) must be at least pairs \(40\)"),
    ],
)
def test_invalid_settings_say_which_and_why(change, message):
    with pytest.raises(ValueError, match=message):
        TrainingConfig(**change)


def test_work_is_bounded_and_the_message_says_how_many_steps_fit():
    default = TrainingConfig()
    assert default.d_model == 512 and training_macs(default) <= settings.TRAIN_MAX_MACS
    assert max_steps(default) >= 2 * default.steps  # room to watch the slow run catch up
    biggest = {"head_dim": 256, "n_head": 8}
    allowed = max_steps(replace(TINY, **biggest, pairs=32, keys=128, values=16, batch=32, steps=1))
    assert 10 < allowed < 100
    config = TrainingConfig(**biggest, steps=allowed)
    assert training_macs(config) <= settings.TRAIN_MAX_MACS
    with pytest.raises(
        ValueError, match=rf"d_model = 8 × 256 = 2048, {allowed + 1} steps\): use at most {allowed} steps"
    ):
        TrainingConfig(**biggest, steps=allowed + 1)


@pytest.mark.slow
def test_same_seed_same_run_and_the_callers_random_state_is_untouched():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    first = train_variant(TINY, "none")
    assert torch.equal(torch.rand(3), expected)
    second = train_variant(TINY, "none")
    assert first.losses == second.losses and first.accuracies == second.accuracies
    assert (first.final_loss, first.final_accuracy) == (second.final_loss, second.final_accuracy)
    assert len(first.losses) == TINY.steps and not first.stopped
    assert train_variant(replace(TINY, seed=1), "none").losses != first.losses


def test_lockstep_runs_are_the_runs_alone_and_overrides_apply():
    calls = []
    results = train_scale(TINY, on_step=lambda *args: calls.append(args))
    assert [r.scale for r in results] == list(SCALE_KINDS)
    for r in results:
        alone = train_variant(TINY, r.scale)
        assert r.losses == alone.losses and r.final_loss == alone.final_loss
    assert calls[:3] == [
        (kind, 1, results[i].losses[0], results[i].accuracies[0]) for i, kind in enumerate(SCALE_KINDS)
    ]
    assert len(calls) == 3 * TINY.steps
    shorter = train_scale(TINY, steps=5, seed=3)
    assert [r.steps_done for r in shorter] == [5, 5, 5]
    assert shorter[0].losses == train_variant(replace(TINY, steps=5, seed=3), "sqrt_dk").losses
    with pytest.raises(ValueError, match=r"steps \(0\)"):
        train_scale(TINY, steps=0)


def test_should_stop_ends_every_run_at_the_same_step():
    seen = []
    results = train_scale(TINY, on_step=lambda kind, step, *_: seen.append(step), should_stop=lambda: len(seen) >= 9)
    assert all(r.stopped and r.steps_done == 3 for r in results)
    one = train_variant(TINY, "sqrt_dk", should_stop=lambda: True)
    assert one.stopped and one.losses == () and math.isfinite(one.final_loss)


@pytest.mark.slow
def test_without_the_scale_the_loss_ends_higher():
    dk, none = train_variant(SMALL, "sqrt_dk"), train_variant(SMALL, "none")  # as train_scale trains them
    assert dk.final_accuracy >= 0.9
    assert none.final_loss > 5 * dk.final_loss and clearly_worse(none, dk)
    assert none.attention_start.max_weight > 0.5 > 0.2 > dk.attention_start.max_weight  # saturated from the start
    assert none.attention_end.wrong_saturated > 0.1 and dk.attention_end.wrong_saturated < 0.01


def test_moving_average_and_the_step_a_level_is_reached():
    assert moving_average([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert first_step_reaching([0.0, 1.0, 1.0, 1.0], 0.9, 2) == 3
    assert first_step_reaching([1.0, 0.0], 0.9, 1) == 1
    assert first_step_reaching([0.5] * 20, 0.9, 10) is None
    with pytest.raises(ValueError, match=r"window \(0\)"):
        moving_average([1.0], 0)


def test_default_config_is_documented_in_settings():
    config = TrainingConfig()
    assert (config.head_dim, config.n_head, config.steps, config.optimiser) == (
        settings.TRAIN_HEAD_DIM.default,
        settings.TRAIN_N_HEAD.default,
        settings.TRAIN_STEPS.default,
        settings.TRAIN_OPTIMISER,
    )
    assert config.learning_rate == settings.TRAIN_LEARNING_RATE["sgd"] in settings.TRAIN_LEARNING_RATES
    assert settings.TRAIN_LEARNING_RATE["adam"] in settings.TRAIN_LEARNING_RATES
    assert training.SATURATED == 0.9

"""The tour's heads sweep: the fixed training set really is fixed, the kept model is the trained one, redundancy
against a hand computation, the sweep deterministic, and its sentences chosen from what it measured."""

import math
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
import torch

from attnviz.i18n.message import render
from attnviz.labs.head_roles.similarity import REDUNDANT_DISTANCE
from attnviz.labs.tour.heads_sweep import (
    REMOVABLE_RISE,
    HeadsSweep,
    SweepConfig,
    SweepPoint,
    alike_pairs,
    head_ablation,
    heads_sweep,
    patterns_similarity,
    sweep_finding,
    sweep_need,
    sweep_number,
    sweep_row,
    sweep_seconds,
)
from attnviz.labs.training import runs as training
from attnviz.labs.training.runs import TrainingConfig, evaluate, scale_for, train_kept, train_variant
from tests.tolerances import derived_bound

# a sweep small enough for a unit test: one and two heads in a 16-wide layer, a few dozen steps
TINY = SweepConfig(d_model=16, n_heads=(1, 2), train_sequences=48, steps=30, pairs=4, keys=8, values=4, batch=16)


def _rows(batch: training.RetrievalBatch) -> list[tuple]:
    """Each sequence as one hashable row (keys, values, query), to compare sets of sequences."""
    return [
        (tuple(k), tuple(v), q)
        for k, v, q in zip(batch.keys.tolist(), batch.values.tolist(), batch.query.tolist(), strict=True)
    ]


def test_a_fixed_training_set_is_seen_whole_each_epoch_and_the_same_in_every_epoch():
    config = TrainingConfig(head_dim=8, n_head=2, steps=4, pairs=4, keys=8, values=4, batch=16, train_sequences=32)
    run = training._Run(config, "sqrt_dk")
    batches = [run.next_batch() for _ in range(4)]  # 4 x 16 = two epochs of 32
    first = Counter(_rows(batches[0]) + _rows(batches[1]))
    second = Counter(_rows(batches[2]) + _rows(batches[3]))
    assert first == second == Counter(_rows(run.training_set))
    assert _rows(batches[0]) + _rows(batches[1]) != _rows(batches[2]) + _rows(batches[3])  # reshuffled each epoch
    held_out = set(_rows(run.held_out))
    assert not held_out & set(first)  # the held-out sequences are not trained on


def test_fresh_batches_are_unchanged_when_no_training_set_is_given():
    config = TrainingConfig(head_dim=8, n_head=2, steps=2, pairs=4, keys=8, values=4, batch=16)
    run = training._Run(config, "sqrt_dk")
    assert run.training_set is None
    data = torch.Generator().manual_seed(config.seed)
    training.retrieval_batch(1024, 4, 8, 4, data)  # the held-out set is drawn first
    expected = training.retrieval_batch(16, 4, 8, 4, data)
    assert _rows(run.next_batch()) == _rows(expected)


def test_training_sequences_must_be_positive():
    with pytest.raises(ValueError, match="train_sequences"):
        TrainingConfig(train_sequences=0)


def test_the_kept_run_is_the_same_run_and_its_model_is_the_trained_one():
    config = TINY.run_config(2)
    kept = train_kept(config, "sqrt_dk")
    assert kept.result == replace(train_variant(config, "sqrt_dk"), seconds=kept.result.seconds)
    again = evaluate(kept.model, kept.held_out, scale_for("sqrt_dk", config.head_dim, config.d_model))
    assert again.loss == kept.result.final_loss and again.accuracy == kept.result.final_accuracy


def test_the_one_run_price_is_a_third_of_the_training_pages():
    config = TINY.run_config(2)
    assert training.training_macs(config) == 3 * training.variant_macs(config)


def _js_by_hand(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen–Shannon distance of two rows, in bits, from its definition (numpy, float64)."""

    def h(x):
        x = x[x > 0]
        return float(-(x * np.log2(x)).sum())

    return math.sqrt(h((p + q) / 2) - (h(p) + h(q)) / 2)


def test_redundancy_against_a_hand_computation():
    # three heads over two query rows of three keys: head 1 copies head 0, head 2 looks elsewhere
    head0 = [[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]
    head2 = [[0.0, 0.0, 1.0], [0.0, 0.2, 0.8]]
    patterns = torch.tensor([head0, head0, head2])  # (n_head, rows, keys)
    similarity = patterns_similarity(patterns)
    expected = np.zeros((3, 3))
    for a in range(3):
        for b in range(3):
            per_row = [
                _js_by_hand(patterns[a, r].double().numpy(), patterns[b, r].double().numpy()) ** 2 for r in (0, 1)
            ]
            expected[a, b] = math.sqrt(np.mean(per_row))
    # float32 entropies of 3 keys, squared-rooted: a few roundings each
    assert np.allclose(similarity.distance, expected, atol=derived_bound("float32", 1.0, 16))
    assert similarity.distance[0, 1] < 1e-3 and similarity.distance[0, 2] > 0.9
    assert alike_pairs(similarity.distance) == 1
    assert similarity.groups(REDUNDANT_DISTANCE) == [[0, 1]]
    assert alike_pairs(np.array([[0.0, 0.2, 0.3], [0.2, 0.0, 0.1], [0.3, 0.1, 0.0]]), 0.2) == 2  # ≤ counts, once


def test_taking_out_a_head_that_already_writes_nothing_changes_nothing():
    config = TINY.run_config(2)
    kept = train_kept(config, "sqrt_dk")
    scale = scale_for("sqrt_dk", config.head_dim, config.d_model)
    with torch.no_grad():
        kept.model.attention.w_o.weight[:, : config.head_dim] = 0.0  # head 0 already silent
    rises = head_ablation(kept.model, kept.held_out, scale)
    assert len(rises) == 2 and rises[0] == 0.0 and rises[1] != 0.0
    assert kept.model.attention.w_o.weight[:, config.head_dim :].abs().sum() > 0  # the copy was ablated, not it


def test_the_sweep_is_deterministic_and_priced():
    first, second = heads_sweep(TINY), heads_sweep(TINY)
    a, b = first.table().drop(columns="seconds"), second.table().drop(columns="seconds")
    assert a.equals(b)
    assert list(a["n_head"]) == [1, 2] and list(a["pairs"]) == [0, 1]
    assert first.point(2).ablation == second.point(2).ablation
    assert np.array_equal(first.point(2).similarity.distance, second.point(2).similarity.distance)
    assert sweep_seconds(TINY) > 0 and sweep_need(TINY).seconds == sweep_seconds(TINY)


def test_the_sweep_config_checks_every_run_before_training():
    with pytest.raises(ValueError, match="divide"):
        SweepConfig(d_model=16, n_heads=(1, 3))
    with pytest.raises(ValueError, match="increasing"):
        SweepConfig(n_heads=(4, 2))
    with pytest.raises(ValueError):
        SweepConfig(d_model=64, n_heads=(16,))  # head_dim 4: below the training lab's smallest d_k


def _point(n_head: int, loss: float, accuracy: float, alike: int, ablation=()) -> SweepPoint:
    """A point with a made-up distance matrix: ``alike`` pairs at 0.1, the rest at 0.5."""
    distance = np.full((n_head, n_head), 0.5)
    np.fill_diagonal(distance, 0.0)
    for i in range(alike):
        distance[0, i + 1] = distance[i + 1, 0] = 0.1
    rows = torch.ones(n_head, 1, 2) / 2
    similarity = replace(patterns_similarity(rows), distance=distance)
    return SweepPoint(n_head, loss, accuracy, 0.5, similarity, alike, tuple(ablation) or (0.1,) * n_head, 0.0)


@pytest.mark.parametrize(
    ("loss", "accuracy", "alike", "key"),
    [
        (1.5, 0.6, 2, "finding_both"),
        (1.5, 0.6, 0, "finding_harm_only"),
        (0.1, 0.97, 2, "finding_redundant_only"),
        (0.1, 0.97, 0, "finding_neither"),
    ],
)
def test_the_finding_says_what_was_measured(loss, accuracy, alike, key):
    sweep = HeadsSweep(TINY, (_point(1, 0.1, 0.97, 0), _point(2, 0.2, 0.95, 0), _point(8, loss, accuracy, alike)))
    finding = sweep_finding(sweep)
    assert finding.key == f"tour_step.pitfall_heads.{key}"
    assert finding.values["alike"] == alike and finding.values["loss"] == loss
    for lang in ("en", "zh"):
        assert f"{loss:.2f}" in render(finding, lang)


def test_the_number_moves_with_the_setting_and_states_the_points_values():
    points = (_point(1, 0.09, 0.98, 0), _point(4, 0.61, 0.85, 1, (0.2, 0.0, 0.3, -0.1)), _point(8, 1.59, 0.64, 3))
    sweep = HeadsSweep(TINY, points)
    four = sweep_number(sweep, 4)
    assert four.values["alike"] == 1 and four.values["pairs"] == 6 and four.values["removable"] == 2
    assert four.values["closest"] == pytest.approx(0.1)
    assert "0.61" in render(four, "en") and "0.61" in render(four, "zh")
    one = sweep_number(sweep, 1)
    assert one.key == "tour_step.pitfall_heads.number_fewest" and one.values["most_loss"] == 1.59
    assert render(four, "en") != render(sweep_number(sweep, 8), "en")
    assert sweep_row(sweep).key == "tour_step.pitfall_heads.row_harm"
    with pytest.raises(KeyError):
        sweep.point(3)


@pytest.mark.slow
def test_the_default_sweep_finds_harm_but_not_redundancy_as_the_step_says():
    """The step's answer (a fixed text) says what the default sweep measures: more heads hurt on 256 sequences,
    and no two heads attend alike. A change of the sweep's defaults that changes that must change the words."""
    sweep = heads_sweep(SweepConfig())
    assert sweep_finding(sweep).key == "tour_step.pitfall_heads.finding_harm_only"
    table = sweep.table()
    assert (table["alike"] == 0).all()
    assert table["loss"].is_monotonic_increasing and table["mean_distance"].iloc[1:].is_monotonic_increasing
    assert table["removable"].iloc[-1] >= 1 and REMOVABLE_RISE > 0

"""Every long job reports its steps: a recording reporter sees counts 1..n of n, stage by stage, and the results
are the same as without one."""

import pytest
import torch

from attnviz.core.masks import KeyRanges
from attnviz.core.progress import Progress
from attnviz.labs import head_roles, scaling
from attnviz.labs.cost import paths as cost
from attnviz.labs.masks.effects import leak_cuts, leak_test
from attnviz.labs.training.runs import TrainingConfig, train_scale
from attnviz.labs.walkthrough.steps import walk_source
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel

TEXT = "the cat sat on the mat because it was tired and the dog barked at the cat all night long"
MODEL = EmbeddedModel(EmbeddedConfig(d_model=32, n_head=4, n_kv_head=2, n_layer=3, causal=True))


def recorder():
    states = []
    return Progress(on_update=states.append), states


def counts(states, label=None):
    return [(s.done, s.total) for s in states if label is None or s.label == label]


def test_a_capture_steps_once_a_layer_and_keeps_its_result():
    progress, states = recorder()
    record = MODEL.run(TEXT, 32, progress=progress)
    assert counts(states) == [(1, 3), (2, 3), (3, 3)]
    assert {s.label for s in states} == {"progress.layer"}
    assert states[-1].remaining_s == 0.0 and states[-1].fraction == 1.0
    plain = MODEL.run(TEXT, 32)
    assert torch.equal(record.layers[2].rows["entropy"], plain.layers[2].rows["entropy"])


def test_a_batch_capture_steps_once_a_layer_for_the_whole_batch():
    calls = []
    from attnviz.core.capture import CaptureSession

    session = CaptureSession(2, 4, 4, keep_qk=False, on_layer=lambda: calls.append(1))
    q = torch.randn(2, 2, 4, 8)
    session.attend(q, q, q, [KeyRanges.causal(4), KeyRanges.causal(4)], scale=8**-0.5)
    assert calls == [1] and [len(s) for s in session.layers] == [1, 1]


def test_scaling_rows_step_once_a_layer():
    record = MODEL.run(TEXT, 32)
    progress, states = recorder()
    rows = scaling.scaling_rows(record, MODEL.d_model, MODEL.head_dim, progress)
    assert counts(states) == [(1, 3), (2, 3), (3, 3)]
    plain = scaling.scaling_rows(record, MODEL.d_model, MODEL.head_dim)
    assert torch.equal(rows.entropy["sqrt_dk"], plain.entropy["sqrt_dk"])


def test_the_leak_test_steps_once_a_run():
    T = len(MODEL.encode(TEXT, 16).tokens)
    progress, states = recorder()
    leak_test(MODEL, TEXT, 16, torch.ones(T, T, dtype=torch.bool).tril(), progress=progress)
    n = 1 + len(leak_cuts(T))
    assert n == 4 and counts(states) == [(i, n) for i in range(1, n + 1)]
    assert {s.label for s in states} == {"progress.run"}


def test_training_steps_once_a_round_of_the_three_runs():
    config = TrainingConfig(head_dim=8, n_head=2, steps=5, pairs=4, keys=8, values=4, batch=4)
    progress, states = recorder()
    results = train_scale(config, progress=progress)
    assert counts(states) == [(i, 5) for i in range(1, 6)]
    assert all(len(r.losses) == 5 for r in results)


def test_the_sink_captures_step_once_a_length_weighed_by_its_cells():
    progress, states = recorder()
    head_roles.sink_vs_length(MODEL, TEXT, (16, 8), progress)
    capture_steps = [s for s in states if s.label == "progress.length"]
    assert [(s.done, s.total) for s in capture_steps] == [(1, 2), (2, 2)]
    assert capture_steps[0].fraction == 64 / (64 + 256)  # 8² of 8² + 16²: the lengths in order, short first


def test_role_stability_steps_once_a_prompt():
    progress, states = recorder()
    head_roles.role_stability(MODEL, [TEXT, "a b c", "one two three four"], 16, progress=progress)
    assert counts(states, "progress.prompt") == [(1, 3), (2, 3), (3, 3)]


def test_the_walkthrough_steps_through_the_pass_and_the_walk():
    progress, states = recorder()
    walk_source(MODEL, TEXT, 16, 1, progress)
    assert counts(states) == [(1, 2), (2, 2)]


@pytest.mark.slow
def test_the_cost_measurement_in_a_child_reports_each_measurement():
    progress, states = recorder()
    rows = cost.measure_in_child((32, 64), progress=progress)
    n = len(cost.measurements((32, 64)))
    assert n == 6 and len(rows) == 6
    assert counts(states, "progress.starting") == [(1, 1)]
    assert counts(states, "progress.measurement") == [(i, 6) for i in range(1, 7)]
    assert [(r["path"], r["tokens"]) for r in rows] == cost.measurements((32, 64))

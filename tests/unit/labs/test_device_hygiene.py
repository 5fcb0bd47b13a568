"""The labs that recompute from a record's q and k run on the model's device, with no GPU: on a fake ``cuda``.

A record keeps q and k on the host; given the model's device, Scaling, rollout, head similarity and training do
their work there (no CPU tensor mixed in, no value read back on the host mid-way) and bring their reduced results
back a bounded number of times: once a layer, or once. Their results on the CPU are checked elsewhere
(test_scaling, test_rollout, test_head_roles, training/test_runs); here, that ``device="cpu"`` changes nothing.
"""

import pytest
import torch

from attnviz.core.capture import capture_attention, capture_weights
from attnviz.core.masks import KeyRanges
from attnviz.core.tokenizer import Token
from attnviz.labs import rollout, scaling
from attnviz.labs.head_roles import similarity
from attnviz.labs.training import runs
from attnviz.models.record import AttentionRecord
from tests.fake_device import DEVICE, FakeCuda, devices_of

N_HEAD, N_KV_HEAD, HEAD_DIM = 4, 2, 8


def record(n: int, n_layer: int = 2, causal: bool = True, pads: int = 0, eager: bool = False) -> AttentionRecord:
    """A record of random q, k and v (or of the weights they give, for the eager route), on the host."""
    g = torch.Generator().manual_seed(n)
    keys = KeyRanges.causal(n, start=pads) if causal else KeyRanges.span(n, pads, n)
    layers = []
    for _ in range(n_layer):
        q = torch.randn(N_HEAD, n, HEAD_DIM, generator=g) * 2
        k, v = torch.randn(2, N_KV_HEAD, n, HEAD_DIM, generator=g)
        if eager:  # the weights themselves, as the eager route keeps them
            layers.append(capture_weights(_weights(q, k, keys), keys, bin_size=2, scale=HEAD_DIM**-0.5))
        else:
            layers.append(capture_attention(q, k, v, keys, scale=HEAD_DIM**-0.5, bin_size=2)[1])
    tokens = [Token(f"t{i}", i, i + 1, pad=i < pads) for i in range(n)]
    return AttentionRecord("random", tokens, layers, N_KV_HEAD, causal, "test", n_input_tokens=n)


def _weights(q, k, keys):
    """Every weight of q and k under ``keys``: (n_head, T, T), rows that see nothing all 0."""
    scores = q @ k.repeat_interleave(N_HEAD // N_KV_HEAD, 0).transpose(-1, -2) * HEAD_DIM**-0.5
    return torch.nan_to_num(scores.masked_fill(~keys.dense(), -torch.inf).softmax(-1), nan=0.0)


RECORDS = {
    "decoder": lambda: record(17),
    "padded encoder": lambda: record(13, causal=False, pads=3),
}


@pytest.fixture
def fake():
    with torch.no_grad(), FakeCuda() as mode:
        yield mode


@pytest.mark.parametrize("chunk_rows", [None, 3], ids=["one chunk", "chunks of 3 rows"])
@pytest.mark.parametrize("kind", list(RECORDS))
def test_scaling_recomputes_on_the_device_and_reads_back_once_a_layer(fake, monkeypatch, kind, chunk_rows):
    rec = RECORDS[kind]()
    if chunk_rows:
        monkeypatch.setattr(scaling, "CHUNK_ELEMENTS", N_HEAD * rec.k_len * chunk_rows)
    rows = scaling.scaling_rows(rec, N_HEAD * HEAD_DIM, HEAD_DIM, device="cuda")
    assert devices_of(rows) == {"cpu"} and rows.entropy["none"].shape == (2, N_HEAD, rec.q_len)
    assert len(fake.transfers) == rec.n_layer * (2 * 3 + 2)  # entropy and max weight of 3 scales, moments, cells


@pytest.mark.parametrize("kind", list(RECORDS))
def test_one_head_under_a_scale_and_its_gradient_on_the_device(fake, kind):
    rec = RECORDS[kind]()
    weights = scaling.head_under_scale(rec, 1, 3, 0.5, (0, 8), (0, 8), device="cuda")
    assert weights.device.type == "cpu" and weights.shape == (8, 8)
    curve = scaling.gradient_curve(rec, 1, 3, device="cuda")
    assert len(curve.jacobian_norm) == len(scaling.GRADIENT_MULTIPLES)
    assert len(fake.transfers) == 2  # the window; the curve's points, all at once


@pytest.mark.parametrize("kind", [*RECORDS, "eager route"])
def test_rollout_and_head_similarity_run_on_the_device(fake, kind):
    rec = record(11, eager=True) if kind == "eager route" else RECORDS[kind]()
    maps = rollout.rollout_maps(rec, device="cuda")
    assert devices_of(maps) == {"cpu"} and maps.rollout.shape == (2, rec.q_len, rec.q_len)
    assert len(fake.transfers) == 3  # the head means, their rollout and the reach
    fake.transfers.clear()
    heads = similarity.head_similarity(rec, device="cuda")
    assert heads.distance.shape == (2 * N_HEAD, 2 * N_HEAD) and len(fake.transfers) == 1


def test_device_weights_are_rolled_out_and_compared_on_their_device(fake):
    means = torch.rand(3, 6, 6).to(DEVICE)
    assert rollout.rollout(means).device == DEVICE  # its identity matrix is made beside them
    assert similarity.js_distance_matrix(torch.rand(5, 4, 6).to(DEVICE)).device == DEVICE  # and its distances


def test_training_evaluates_on_its_device_and_reads_back_once(fake):
    config = runs.TrainingConfig(head_dim=8, n_head=2, device="cuda")
    model = runs.build_model(config).to(config.device)
    data = runs.retrieval_batch(2 * runs.EVAL_CHUNK + 5, config.pairs, config.keys, config.values, torch.Generator())
    runs.evaluate(model, data, 8**-0.5)  # data drawn on the host, moved to the model's device
    assert len(fake.transfers) == 2  # the losses and accuracies of the three chunks; the attention summary


def test_a_training_device_must_be_a_device():
    with pytest.raises(ValueError, match="device"):
        runs.TrainingConfig(device="gpu please")


def test_the_cpu_given_as_a_device_changes_nothing():
    rec = record(9)
    assert torch.equal(
        rollout.rollout_maps(rec, device="cpu").rollout, rollout.rollout_maps(rec).rollout
    ) and scaling.head_row_stats(rec, 1, 2, 2.0, 0.9, device="cpu") == scaling.head_row_stats(rec, 1, 2, 2.0, 0.9)
    a = runs.train_scale(runs.TrainingConfig(steps=3, head_dim=8, n_head=2, device="cpu"))
    b = runs.train_scale(runs.TrainingConfig(steps=3, head_dim=8, n_head=2))
    assert [r.losses for r in a] == [r.losses for r in b]

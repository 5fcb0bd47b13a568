"""Hosted mode's switches and allowlist, the request budget, the training cap and the upload limits."""

import math

import pytest

from attnviz import settings
from attnviz.core.budget import request_cost, training_seconds
from attnviz.core.capture import predicted_nbytes
from attnviz.labs.training.runs import TrainingConfig, training_macs

SMOLLM2 = (30, 9, 3, 64)  # n_layer, n_head, n_kv_head, head_dim

EMBEDDED_LARGEST = (12, 64, 64, 16)  # d_model 1,024 over 64 heads


def test_the_budget_is_smollm2s_largest_request():
    at_limit = request_cost(*SMOLLM2, 8192)
    assert at_limit.head_tokens == settings.REQUEST_HEAD_TOKENS == 2_211_840 and not at_limit.over
    # benchmarks/capture.py measured that request at 2,293 MB peak (with q and k); the estimate is within 10 %
    assert at_limit.peak_bytes / 2**20 == pytest.approx(2293, rel=0.1)
    assert request_cost(*SMOLLM2, 8192, budget=settings.REQUEST_HEAD_TOKENS - 1).over


def test_the_embedded_models_largest_setting_reads_at_most_2880_tokens():
    cost = request_cost(*EMBEDDED_LARGEST, 2048)
    assert not cost.over and cost.max_tokens == 2880
    over = request_cost(*EMBEDDED_LARGEST, 2881)
    assert over.over and over.head_tokens == 2881 * 768
    assert over.max_layer_heads == settings.REQUEST_HEAD_TOKENS // 2881 == 767
    assert not request_cost(*EMBEDDED_LARGEST, over.max_tokens).over
    # the record it would hold is the capture's own prediction, and the time grows with every head's T x T scores
    record = predicted_nbytes(*EMBEDDED_LARGEST, 2881)
    assert over.peak_bytes == settings.PEAK_BASE_BYTES + math.ceil(settings.PEAK_RECORD_FACTOR * record)
    assert over.seconds == pytest.approx(2881**2 * 768 * settings.SECONDS_PER_CELL)


def test_no_request_within_the_budget_costs_more_than_the_budgets_own():
    """With at most MAX_TOKENS tokens, time (T x budget) and memory stay below SmolLM2's 8,192-token request."""
    largest = request_cost(*SMOLLM2, settings.MAX_TOKENS.high)
    for dims in (EMBEDDED_LARGEST, (12, 12, 12, 32), (6, 12, 12, 32), (1, 1, 1, 512), (2, 4, 4, 16)):
        cost = request_cost(*dims, min(settings.MAX_TOKENS.high, request_cost(*dims, 1).max_tokens))
        assert not cost.over
        assert cost.seconds <= largest.seconds * 1.0001


@pytest.mark.parametrize("bad", [dict(n_layer=0), dict(n_head=0), dict(head_dim=-1)])
def test_a_model_without_heads_cannot_be_priced(bad):
    dims = {"n_layer": 2, "n_head": 4, "n_kv_head": 4, "head_dim": 16, **bad}
    with pytest.raises(ValueError, match="must be at least 1"):
        request_cost(**dims, tokens=10)


def test_the_largest_training_fits_the_session_cap():
    assert training_seconds(settings.TRAIN_MAX_MACS) <= settings.TRAIN_SESSION_SECONDS
    assert training_seconds(training_macs(TrainingConfig())) == pytest.approx(training_macs(TrainingConfig()) * 12e-12)


def test_an_accelerator_scales_the_budget_and_the_seconds_by_its_measured_speed(monkeypatch):
    from attnviz.core import device_speed

    device_speed.speedup.cache_clear()
    monkeypatch.setattr(
        device_speed, "reference_seconds", lambda device, repeats=3: device_speed.REFERENCE_CPU_SECONDS / 40
    )
    try:
        cpu = request_cost(30, 9, 3, 64, 8192)
        gpu = request_cost(30, 9, 3, 64, 8192, device="cuda:0")
        assert device_speed.speedup("cpu") == device_speed.speedup(None) == 1.0
        assert gpu.budget == 40 * cpu.budget and gpu.seconds == pytest.approx(cpu.seconds / 40)
        assert gpu.peak_bytes == cpu.peak_bytes  # host memory is host memory
        monkeypatch.setattr(device_speed, "reference_seconds", lambda device, repeats=3: 1e-12)
        assert device_speed.speedup("cuda:1") == device_speed.MAX_SPEEDUP
        monkeypatch.setattr(device_speed, "reference_seconds", lambda device, repeats=3: 100.0)
        assert device_speed.speedup("mps") == 1.0  # never slower than the constants say
    finally:
        device_speed.speedup.cache_clear()


def test_the_reference_capture_runs_on_the_cpu():
    from attnviz.core.device_speed import reference_seconds

    assert 0 < reference_seconds("cpu", repeats=1) < 5


def test_device_memory_counts_the_chunk_buffers_and_the_eager_routes_weights():
    from attnviz.core.budget import device_nbytes
    from attnviz.core.capture.kernel import DEVICE_CHUNK_ELEMENTS

    small = device_nbytes(30, 9, 3, 64, 16)
    assert small >= 2 * 9 * 16 * 16 * 4 and small < 2**20
    long = device_nbytes(30, 9, 3, 64, 8192)
    assert long >= 2 * DEVICE_CHUNK_ELEMENTS * 4  # the buffers stop growing at the chunk's bound
    eager = device_nbytes(30, 9, 3, 64, 8192, all_weights=True)
    assert eager - long == 30 * 9 * 8192 * 8192 * 4

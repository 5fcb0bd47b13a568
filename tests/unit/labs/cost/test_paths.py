"""The Cost page's library: tiling gives the plain softmax's answer, and the naive path's bound."""

import pytest
import torch

from attnviz.labs.cost import paths as cost
from tests.tolerances import bound, derived_bound


@pytest.mark.parametrize("block", [1, 3, 8, 64])
def test_online_softmax_equals_the_plain_softmax(block):
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(5, 16, generator=g) * 3,
        torch.randn(37, 16, generator=g) * 3,
        torch.randn(37, 16, generator=g),
    )
    tiled, steps = cost.online_softmax_attention(q, k, v, block)
    plain = torch.softmax((q @ k.T) / 4.0, dim=-1) @ v
    # two routes to an output: a score of 16 products (as large as the largest |q·k| / 4) rounds differently, and the
    # online pass rescales a running sum of values (≤ max |v|) over the 37 keys
    largest = float((q @ k.T).abs().max()) / 4.0
    score_tol = derived_bound("float32", largest, 16)
    assert (tiled - plain).abs().max().item() <= derived_bound("float32", largest * float(v.abs().max()), 16 + 37)
    assert len(steps) == -(-37 // block) and steps[-1].block[1] == 37
    # the running max only grows, and the last one is the row's max score
    ms = [s.m for s in steps]
    assert ms == sorted(ms) and ms[-1] == pytest.approx(float((q[0] @ k.T / 4.0).max()), abs=score_tol)


def test_tiling_example_matches_and_rejects_a_zero_block():
    example = cost.tiling_example(24, 8, seed=3)
    # online against plain: two routes (tests/tolerances.py); a float32 softmax of 24 keys summed again, against 1
    row_sum = derived_bound("float32", 1.0, 2 * 24)
    assert example.max_difference <= bound("attention") and example.weights.sum().item() == pytest.approx(
        1.0, abs=row_sum
    )
    with pytest.raises(ValueError, match="block"):
        cost.online_softmax_attention(torch.zeros(1, 4), torch.zeros(2, 4), torch.zeros(2, 4), 0)


def test_the_workload_is_one_layer_of_the_largest_bundled_model_as_the_registry_knows_it():
    from attnviz.models.registry import largest_bundled_shape

    assert largest_bundled_shape() == cost.WORKLOAD
    assert (cost.N_HEAD, cost.N_KV_HEAD, cost.HEAD_DIM) == (9, 3, 64)  # SmolLM2-135M's, unloaded
    q, k, v = cost._inputs(4, "cpu")
    assert q.shape == (1, 9, 4, 64) and k.shape == v.shape == (1, 3, 4, 64)


def test_naive_memory_and_where_it_stops_fitting():
    assert cost.naive_bytes(8192) == 2 * 9 * 8192 * 8192 * 4  # 4.8 GB for one SmolLM2 layer
    assert cost.naive_limit(cost.naive_bytes(4096)) == 4096
    assert cost.naive_limit(cost.naive_bytes(4096) - 1) == 4095


def test_every_path_gives_the_same_output():
    q, k, v = cost._inputs(64, "cpu")
    outs = [cost.run_path(path, q, k, v) for path in cost.PATHS]
    for out in outs[1:]:
        assert (out - outs[0]).abs().max().item() <= bound("attention")  # two routes (tests/tolerances.py)
    with pytest.raises(ValueError, match="path must be one of"):
        cost.run_path("magic", q, k, v)


def test_measure_reports_every_path_within_bounds():
    rows = cost.measure([32, 64], "cpu", repeats=1)
    assert {(r["path"], r["tokens"]) for r in rows} == {(p, n) for p in cost.PATHS for n in (32, 64)}
    assert all(r["seconds"] > 0 and r["peak_mb"] >= 0 for r in rows)
    with pytest.raises(ValueError, match="sizes must lie in"):
        cost.measure([cost.MAX_TOKENS + 1])

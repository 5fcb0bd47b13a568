"""The attention benchmark's harness: the yardstick it compares against, interleaved and warmed-up timing."""

import pytest

from attnviz.core.attention import (
    scaled_dot_product_attention,
)
from attnviz.labs.cost import sdpa_bench as bench_sdpa
from tests.tolerances import bound

TOL = bound("attention")  # float32, two routes (tests/tolerances.py)


def test_benchmark_yardstick_and_rows():
    x = bench_sdpa.make_inputs(32, n_head=9, n_kv_head=3, head_dim=8)
    out, w = bench_sdpa.naive_attention(x["q"], x["k"], x["v"], x["mask"])
    ours, ours_w = scaled_dot_product_attention(x["q"], x["k"], x["v"], is_causal=True)
    assert (out - ours).abs().max().item() <= TOL and (w - ours_w).abs().max().item() <= TOL
    rows = bench_sdpa.run_benchmark(tokens=[16], repeats=2, memory=False)
    assert [r["case"] for r in rows] == list(bench_sdpa.CASES)
    for row in rows:
        assert row["ours_s"] > 0 and row["reference_s"] > 0 and row["ours_s"] <= row["ours_median_s"]
        assert row["time_ratio"] == pytest.approx(row["ours_s"] / row["reference_s"])
        assert row["met"] == (row["time_ratio"] <= row["target"])
        assert row["threads"] == 1 and row["ours_peak_mb"] is None
    assert {r["target"] for r in rows} == {1.05, 1.2}
    with pytest.raises(ValueError, match="unknown cases"):
        bench_sdpa.run_benchmark(tokens=[16], cases=["nope"], memory=False)


def test_benchmark_interleaves_and_warms_up():
    order = []
    ours, ref = bench_sdpa.time_interleaved(lambda: order.append("a"), lambda: order.append("b"), repeats=3)
    assert order == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warm-up, then ABBA
    assert len(ours) == len(ref) == 3

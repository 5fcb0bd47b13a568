"""The attention benchmark's peak memory, measured in fresh processes: it sees the weights a path holds."""

from attnviz.labs.cost import sdpa_bench as bench_sdpa


def test_benchmark_peak_memory_sees_the_weights():
    # 9 heads x 512 x 512 float32 weights are 9 MiB; the naive form holds a second copy of the scores.
    weights_mb = 9 * 512 * 512 * 4 / 2**20
    ours = bench_sdpa.peak_extra_mb("weights, no mask", 512, "ours")
    naive = bench_sdpa.peak_extra_mb("weights, no mask", 512, "reference")
    assert weights_mb * 0.95 <= ours <= weights_mb * 1.5
    assert naive >= 1.8 * weights_mb

"""Speed and peak memory of attnviz's attention, side by side with what it should match.

Two comparisons, each run in one process with the two implementations
interleaved, so that load on the machine hits both alike:

* the fast path, :func:`attnviz.core.attention.fused_attention`, against torch's
  ``F.scaled_dot_product_attention`` (target: at most 1.05x its time);
* the inspectable path, :func:`attnviz.core.attention.scaled_dot_product_attention`,
  which also returns the weights, against the textbook four lines
  (:func:`naive_attention`; target: at most 1.2x its time).

Timing runs on one thread (``torch.set_num_threads(1)``): on a small CPU the
thread pool's scheduling noise is larger than the differences being measured.
Peak memory is measured in a fresh Python per implementation, because torch's
CPU allocations are invisible to ``tracemalloc`` and a process's peak RSS only
ever grows. The functions here return rows and print nothing;
``python -m benchmarks.sdpa`` prints them.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from attnviz.core.attention import fused_attention, group_size, naive_attention, scaled_dot_product_attention
from attnviz.core.devices import synchronize
from attnviz.core.masks import causal_mask
from attnviz.labs.cost.paths import HEAD_DIM, N_HEAD, N_KV_HEAD
from attnviz.labs.cost.peak_memory import maxrss_bytes, reset_peak_rss, run_child, status_bytes

DEFAULT_TOKENS = (512, 2048, 4096)
BATCH = 1  # one sequence, of SmolLM2-135M's attention shape (attnviz.labs.cost.paths): 9 query heads, 3 K/V heads, head_dim 64
TIMING_THREADS = 1
FUSED_TARGET = 1.05
INSPECTABLE_TARGET = 1.2

Inputs = dict[str, Tensor]


def make_inputs(
    tokens: int,
    batch: int = BATCH,
    n_head: int = N_HEAD,
    n_kv_head: int = N_KV_HEAD,
    head_dim: int = HEAD_DIM,
    seed: int = 0,
) -> Inputs:
    """Random float32 q (B, n_head, T, hd), k and v (B, n_kv_head, T, hd), and the causal mask (T, T)."""
    if tokens < 1:
        raise ValueError(f"tokens ({tokens}) must be >= 1")
    group_size(n_head, n_kv_head)
    g = torch.Generator().manual_seed(seed)
    return {
        "q": torch.randn(batch, n_head, tokens, head_dim, generator=g),
        "k": torch.randn(batch, n_kv_head, tokens, head_dim, generator=g),
        "v": torch.randn(batch, n_kv_head, tokens, head_dim, generator=g),
        "mask": causal_mask(tokens),
    }


@dataclass(frozen=True)
class Case:
    """One comparison: our call and the reference call on the same inputs."""

    ours_name: str
    ours: Callable[[Inputs], object]
    reference_name: str
    reference: Callable[[Inputs], object]
    target: float


CASES: dict[str, Case] = {
    "fused, causal": Case(
        "fused_attention(is_causal=True)",
        lambda x: fused_attention(x["q"], x["k"], x["v"], is_causal=True),
        "F.scaled_dot_product_attention(is_causal=True)",
        lambda x: F.scaled_dot_product_attention(x["q"], x["k"], x["v"], is_causal=True, enable_gqa=True),
        FUSED_TARGET,
    ),
    "fused, no mask": Case(
        "fused_attention()",
        lambda x: fused_attention(x["q"], x["k"], x["v"]),
        "F.scaled_dot_product_attention()",
        lambda x: F.scaled_dot_product_attention(x["q"], x["k"], x["v"], enable_gqa=True),
        FUSED_TARGET,
    ),
    "weights, causal mask": Case(
        "scaled_dot_product_attention(mask=causal)",
        lambda x: scaled_dot_product_attention(x["q"], x["k"], x["v"], mask=x["mask"]),
        "naive_attention(mask=causal)",
        lambda x: naive_attention(x["q"], x["k"], x["v"], x["mask"]),
        INSPECTABLE_TARGET,
    ),
    # Ours builds its causal mask inside the timed call; the reference is handed one.
    "weights, is_causal": Case(
        "scaled_dot_product_attention(is_causal=True)",
        lambda x: scaled_dot_product_attention(x["q"], x["k"], x["v"], is_causal=True),
        "naive_attention(mask=causal)",
        lambda x: naive_attention(x["q"], x["k"], x["v"], x["mask"]),
        INSPECTABLE_TARGET,
    ),
    "weights, no mask": Case(
        "scaled_dot_product_attention()",
        lambda x: scaled_dot_product_attention(x["q"], x["k"], x["v"]),
        "naive_attention()",
        lambda x: naive_attention(x["q"], x["k"], x["v"]),
        INSPECTABLE_TARGET,
    ),
}


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` intra-op threads, then restore the previous count."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def time_interleaved(
    ours: Callable[[], object], reference: Callable[[], object], repeats: int = 5, warmup: int = 1
) -> tuple[list[float], list[float]]:
    """Seconds per call of each, alternating which goes first (ABBA) so drift hits both alike.

    The returned tensors are freed outside the timed span, as a caller keeps them.
    """
    if repeats < 1:
        raise ValueError(f"repeats ({repeats}) must be >= 1")
    for _ in range(warmup):
        for call in (ours, reference):
            result = call()
            if isinstance(result, torch.Tensor):
                synchronize(result.device)
    times: dict[int, list[float]] = {0: [], 1: []}
    calls = (ours, reference)
    for i in range(repeats):
        for which in (0, 1) if i % 2 == 0 else (1, 0):
            start = time.perf_counter()
            result = calls[which]()
            if isinstance(result, torch.Tensor):
                synchronize(result.device)  # an accelerator's kernels run ahead of Python: time their end
            times[which].append(time.perf_counter() - start)
            del result
    return times[0], times[1]


def measure_time(case: str, tokens: int, repeats: int = 5) -> dict:
    """Best and median seconds of ours and the reference for one case, on one thread."""
    spec = CASES[case]
    inputs = make_inputs(tokens)
    with torch_threads(TIMING_THREADS):
        ours, reference = time_interleaved(lambda: spec.ours(inputs), lambda: spec.reference(inputs), repeats)
    return {
        "ours_s": min(ours),
        "reference_s": min(reference),
        "ours_median_s": statistics.median(ours),
        "reference_median_s": statistics.median(reference),
    }


def bare_products(x: Inputs) -> tuple[Tensor, Tensor]:
    """The two products any attention that returns its weights must form and hold, and nothing else: q·kᵀ
    (B, n_head, T, T) and that times v (B, n_head, T, head_dim), with no scale, mask or softmax. Its peak memory
    is the floor for a case's: what the result holds plus whatever this CPU's matmul kernels keep while they run
    (packing buffers, which differ by BLAS and instruction set)."""
    q, k, v = x["q"], x["k"], x["v"]
    B, n_head, T, head_dim = q.shape
    group = n_head // k.shape[1]
    scores = q.reshape(B, k.shape[1], group * T, head_dim) @ k.transpose(-2, -1)  # (B, n_kv_head, group·T, T)
    output = scores @ v  # (B, n_kv_head, group·T, head_dim)
    return output.view(B, n_head, T, head_dim), scores.view(B, n_head, T, -1)


def peak_extra_mb_here(case: str, tokens: int, which: str) -> float:
    """MiB that one call of ``which`` ("ours", "reference", or "floor": :func:`bare_products` on the same inputs)
    adds to this process's peak RSS.

    Meant for a fresh process (see :func:`peak_extra_mb`). The inputs are allocated
    before the baseline; the returned tensors count, as a caller holds them.
    """
    if which not in ("ours", "reference", "floor"):
        raise ValueError(f"which must be 'ours', 'reference' or 'floor', not {which!r}")
    torch.set_num_threads(TIMING_THREADS)
    call = bare_products if which == "floor" else getattr(CASES[case], which)
    inputs = make_inputs(tokens)
    call(make_inputs(16))  # loads kernels and pools without touching the real sizes
    gc.collect()
    baseline, reset = reset_peak_rss()
    result = call(inputs)
    peak = status_bytes("VmHWM") if reset else maxrss_bytes()
    del result
    return max(peak - baseline, 0) / 2**20


_CHILD = (
    "import json, sys\n"
    "from attnviz.labs.cost.sdpa_bench import peak_extra_mb_here\n"
    "print(json.dumps(peak_extra_mb_here(*json.loads(sys.argv[1]))))\n"
)


def peak_extra_mb(case: str, tokens: int, which: str, timeout_s: float = 300.0) -> float:
    """:func:`peak_extra_mb_here` run in a fresh Python, so no earlier run raised its peak."""
    proc = run_child(["-c", _CHILD, json.dumps([case, tokens, which])], timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"memory run for {case!r} at {tokens} tokens ({which}) failed:\n{proc.stderr[-2000:]}")
    return float(proc.stdout.strip().splitlines()[-1])


def _ratio(ours: float, reference: float) -> float | None:
    return ours / reference if reference > 0 else None


def run_benchmark(
    tokens: Sequence[int] = DEFAULT_TOKENS,
    cases: Sequence[str] = tuple(CASES),
    repeats: int = 5,
    memory: bool = True,
    memory_workers: int = 2,
) -> list[dict]:
    """One row per (case, tokens): times, peak memory, their ratios and whether the target is met.

    ``time_ratio`` compares the best of ``repeats`` timed calls (after a warm-up);
    ``met`` is ``time_ratio <= target``. Memory runs, one fresh process per
    implementation, come after all timing so they cannot disturb it; with
    ``memory=False`` the memory fields are None.
    """
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise ValueError(f"unknown cases {unknown}; choose from {list(CASES)}")
    rows = []
    for n in tokens:
        for case in cases:
            spec = CASES[case]
            times = measure_time(case, n, repeats)
            ratio = times["ours_s"] / times["reference_s"]
            rows.append(
                {
                    "case": case,
                    "tokens": n,
                    "ours": spec.ours_name,
                    "reference": spec.reference_name,
                    **times,
                    "time_ratio": ratio,
                    "ours_peak_mb": None,
                    "reference_peak_mb": None,
                    "memory_ratio": None,
                    "target": spec.target,
                    "met": ratio <= spec.target,
                    "threads": TIMING_THREADS,
                    "repeats": repeats,
                }
            )
    if memory:
        jobs = [(row["case"], row["tokens"], which) for row in rows for which in ("ours", "reference")]
        with ThreadPoolExecutor(max_workers=memory_workers) as pool:
            peaks = list(pool.map(lambda job: peak_extra_mb(*job), jobs))
        for i, row in enumerate(rows):
            row["ours_peak_mb"], row["reference_peak_mb"] = peaks[2 * i], peaks[2 * i + 1]
            row["memory_ratio"] = _ratio(row["ours_peak_mb"], row["reference_peak_mb"])
    return rows


def describe_setup() -> dict:
    """What the numbers were measured on, for the header of a report."""
    return {
        "torch": torch.__version__,
        "device": "cpu",
        "dtype": "float32",
        "batch": BATCH,
        "n_head": N_HEAD,
        "n_kv_head": N_KV_HEAD,
        "head_dim": HEAD_DIM,
        "timing_threads": TIMING_THREADS,
        "cpu_count": os.cpu_count(),
    }

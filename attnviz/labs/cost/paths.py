"""What long attention costs, measured: the naive path, torch's fused kernel and attnviz's chunked capture.

The naive path materialises the (n_head, n, n) scores and weights, so its
memory grows as n²; torch's fused SDPA (FlashAttention-style tiling) and the
chunked capture hold one tile at a time, so theirs grows as n. This module
measures time and peak memory against n on the current device, predicts where
the naive path stops fitting, and implements tiling itself on a small example
(:func:`online_softmax_attention`) so it can be drawn step by step.

Sizes are bounded (:data:`NAIVE_MAX_TOKENS`, :data:`MAX_TOKENS`) so a page
that runs this never takes a server down; on the CPU the measurements run in
a child process, so its peak memory is its own and not the server's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from attnviz import settings
from attnviz.core.attention import naive_attention
from attnviz.core.capture import capture_attention, pool_bin
from attnviz.core.masks import KeyRanges
from attnviz.core.progress import Progress, or_none
from attnviz.i18n.message import Message, msg
from attnviz.labs.cost.peak_memory import reset_peak_rss, status_bytes, stream_child
from attnviz.models.registry import largest_bundled_shape

PATHS = ("naive", "fused", "chunked")
PATH_TITLES = {
    "naive": "naive: softmax(QKᵀ/√d)·V with the n × n matrix",
    "fused": "torch fused SDPA (tiled kernel)",
    "chunked": "attnviz chunked capture (every statistic + pooled maps)",
}


def path_titles() -> dict[str, Message]:
    """:data:`PATH_TITLES` as messages (the legend of the Cost page's charts)."""
    return {
        "naive": msg("cost.path_naive"),
        "fused": msg("cost.path_fused"),
        "chunked": msg("cost.path_chunked"),
    }


SIZES = (256, 512, 1024, 2048, 4096, 8192)
NAIVE_MAX_TOKENS = 2048  # the naive path is run up to here (about 0.3 GB); beyond, it is predicted
MAX_TOKENS = settings.MAX_TOKENS.high
# the workload: one layer of the largest bundled model, shaped as the registry knows it before loading it
# (SmolLM2-135M: 9 query heads sharing 3 key/value heads of 64 dims)
WORKLOAD = largest_bundled_shape()
N_HEAD, N_KV_HEAD, HEAD_DIM = WORKLOAD.n_head, WORKLOAD.n_kv_head, WORKLOAD.head_dim


def naive_bytes(n: int, n_head: int = N_HEAD, dtype_bytes: int = 4) -> int:
    """The naive path's two (n_head, n, n) matrices (scores and weights), in bytes."""
    return 2 * n_head * n * n * dtype_bytes


def naive_limit(available_bytes: int, n_head: int = N_HEAD, dtype_bytes: int = 4) -> int:
    """The longest input whose naive attention (one layer, batch 1) fits in ``available_bytes``."""
    return math.isqrt(max(0, available_bytes) // (2 * n_head * dtype_bytes))


def available_bytes(device: str) -> int:
    """Memory free for tensors on ``device`` now."""
    if device == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.mem_get_info()[0])
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def _inputs(n: int, device: str) -> tuple[Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, N_HEAD, n, HEAD_DIM, generator=g).to(device)  # (1, n_head, n, hd)
    k = torch.randn(1, N_KV_HEAD, n, HEAD_DIM, generator=g).to(device)  # (1, n_kv_head, n, hd)
    v = torch.randn(1, N_KV_HEAD, n, HEAD_DIM, generator=g).to(device)
    return q, k, v


def run_path(path: str, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """One causal attention of ``path`` on q (1, n_head, n, hd), k and v (1, n_kv_head, n, hd): the output."""
    n = q.shape[2]
    if path == "naive":
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        return naive_attention(q, k, v, mask)[0]
    if path == "fused":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    if path == "chunked":
        out, _ = capture_attention(
            q[0], k[0], v[0], KeyRanges.causal(n), scale=HEAD_DIM**-0.5, bin_size=pool_bin(n, N_HEAD), keep_qk=False
        )
        return out[None]
    raise ValueError(f"path must be one of {', '.join(PATHS)}, not {path!r}")


def _sync(device: str) -> None:
    """Wait for the device's queued work, so a timer measures the work and not its launch."""
    if device == "cuda":
        torch.cuda.synchronize()
    elif device == "mps":
        torch.mps.synchronize()


def measurements(sizes: Sequence[int]) -> list[tuple[str, int]]:
    """The (path, tokens) pairs :func:`measure` runs, in order: every path at each size, naive up to its bound."""
    return [(path, n) for n in sizes for path in PATHS if not (path == "naive" and n > NAIVE_MAX_TOKENS)]


def measurement_weights(sizes: Sequence[int]) -> list[float]:
    """Each measurement's relative cost, for the progress estimate: its n² attention cells (every path does
    n² work; the fit in :func:`attnviz.core.progress.stage_seconds` adds the per-call overhead)."""
    return [float(n * n) for _, n in measurements(sizes)]


def measure(
    sizes: Sequence[int] = SIZES, device: str = "cpu", repeats: int = 2, progress: Progress | None = None
) -> list[dict]:
    """Time (best of ``repeats``) and peak extra memory of each path at each size, in this process.

    On the CPU the peak is the process's resident-set high-water mark, reset
    before each call (Linux), so run it in a process of its own
    (:func:`measure_in_child`); on CUDA it is torch's allocator peak. ``progress``:
    a step a measurement (:func:`measurements`), weighed by :func:`measurement_weights`.
    """
    if any(n < 1 or n > MAX_TOKENS for n in sizes):
        raise ValueError(f"sizes must lie in 1..{MAX_TOKENS}, got {list(sizes)}")
    progress = or_none(progress)
    progress.stage("progress.measurement", len(measurements(sizes)), weights=measurement_weights(sizes))
    rows = []
    for n in sizes:
        q, k, v = _inputs(n, device)
        for path in PATHS:
            if path == "naive" and n > NAIVE_MAX_TOKENS:
                continue
            run_path(path, *_inputs(16, device))  # load kernels outside the measurement
            best = math.inf
            for _ in range(repeats):
                if device == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                else:
                    base, _ = reset_peak_rss()
                _sync(device)
                start = time.perf_counter()
                out = run_path(path, q, k, v)
                _sync(device)
                best = min(best, time.perf_counter() - start)
                if device == "cuda":
                    peak = torch.cuda.max_memory_allocated() - base
                else:
                    peak = (status_bytes("VmHWM") or base) - base
                del out
            rows.append({"path": path, "tokens": n, "seconds": best, "peak_mb": max(peak, 0) / 2**20})
            progress.step()
    return rows


STEP_LINE = "attnviz-cost-step"  # what the child writes to stderr after each measurement (and once when it is ready)


class _StepLines(Progress):
    """The child's side of the progress: a line on stderr per step, which the parent counts."""

    def __init__(self) -> None:
        super().__init__()

    def stage(self, label: str, total: int, weights: Sequence[float] | None = None, **params: object) -> None:
        pass

    def step(self, n: int = 1) -> None:
        for _ in range(n):
            print(STEP_LINE, file=sys.stderr, flush=True)


def measure_in_child(
    sizes: Sequence[int] = SIZES, timeout_s: float = 600.0, progress: Progress | None = None
) -> list[dict]:
    """:func:`measure` on the CPU in a fresh Python, so the peaks are the measurement's own.

    ``progress``: the child's start (its imports, weighed as nothing: its own stage), then a step a measurement,
    as the child reports them on stderr.
    """
    progress = or_none(progress)
    progress.plan(
        [
            ("progress.starting", 1, [0.0]),
            ("progress.measurement", len(measurements(sizes)), measurement_weights(sizes)),
        ]
    )
    progress.stage("progress.starting", 1, weights=[0.0])
    args = ["-m", "attnviz.labs.cost.paths", "--sizes", *map(str, sizes), "--progress"]
    started, other = [False], []

    def on_line(line: str) -> None:
        if line.strip() != STEP_LINE:
            other.append(line)
        elif not started[0]:
            started[0] = True
            progress.step()
            progress.stage("progress.measurement", len(measurements(sizes)), weights=measurement_weights(sizes))
        else:
            progress.step()

    returncode, stdout = stream_child(args, timeout_s, on_line)
    if returncode != 0:
        lines = "".join(other).strip().splitlines()
        raise RuntimeError(msg("cost.failed", why=lines[-1] if lines else returncode))
    return json.loads(stdout)


@dataclass(frozen=True)
class TilingStep:
    """The running state of one query row after a key block: the block's scores, the max m and normaliser l so far."""

    block: tuple[int, int]
    scores: Tensor  # (block,)
    m: float
    l: float  # noqa: E741 (the paper's name)


def online_softmax_attention(
    q: Tensor, k: Tensor, v: Tensor, block: int, row: int = 0
) -> tuple[Tensor, list[TilingStep]]:
    """Attention of q (n, hd) over k, v (s, hd) one key block at a time, never holding n x s.

    For each block the running max ``m``, normaliser ``l = Σ exp(s - m)`` and output
    ``o = Σ exp(s - m)·v`` are rescaled by ``exp(m_old - m_new)`` and extended,
    as FlashAttention does; ``o / l`` at the end is softmax(q·kᵀ/√d)·v exactly.
    Returns the output (n, hd) and the steps of query ``row``, for drawing.
    """
    if block < 1:
        raise ValueError(f"block ({block}) must be >= 1")
    n, head_dim = q.shape
    scale = head_dim**-0.5
    m = torch.full((n, 1), -math.inf)  # (n, 1)
    l = torch.zeros(n, 1)  # noqa: E741
    o = torch.zeros(n, head_dim)  # (n, hd)
    steps = []
    for c0 in range(0, k.shape[0], block):
        c1 = min(k.shape[0], c0 + block)
        s = (q @ k[c0:c1].T) * scale  # (n, block): the only score tile held
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        rescale = torch.exp(m - m_new)  # (n, 1): earlier blocks were scaled by an older max
        p = torch.exp(s - m_new)  # (n, block)
        l = l * rescale + p.sum(dim=-1, keepdim=True)  # noqa: E741
        o = o * rescale + p @ v[c0:c1]  # (n, hd)
        m = m_new
        steps.append(TilingStep((c0, c1), s[row].clone(), float(m[row]), float(l[row])))
    return o / l, steps


@dataclass(frozen=True)
class TilingExample:
    """One random query over ``n_keys`` keys, attended tiled and plain: the steps and both answers."""

    steps: list[TilingStep]
    weights: Tensor  # (n_keys,) the plain softmax's weights
    tiled: Tensor  # (head_dim,) the tiled output
    plain: Tensor  # (head_dim,) the plain output

    @property
    def max_difference(self) -> float:
        return float((self.tiled - self.plain).abs().max())


def tiling_example(n_keys: int, block: int, seed: int = 0, head_dim: int = 16) -> TilingExample:
    """A small example for drawing: online softmax against the plain n x n way, same inputs."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, head_dim, generator=g) * 1.5  # (1, hd)
    k = torch.randn(n_keys, head_dim, generator=g) * 1.5  # (n_keys, hd)
    v = torch.randn(n_keys, head_dim, generator=g)
    tiled, steps = online_softmax_attention(q, k, v, block)
    weights = torch.softmax((q @ k.T) * head_dim**-0.5, dim=-1)  # (1, n_keys): the whole row at once
    return TilingExample(steps=steps, weights=weights[0], tiled=tiled[0], plain=(weights @ v)[0])


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m attnviz.labs.cost.paths --sizes 256 512``: the measurement as JSON (for :func:`measure_in_child`)."""
    parser = argparse.ArgumentParser(prog="python -m attnviz.labs.cost.paths", description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--progress", action="store_true", help=f"write {STEP_LINE} to stderr after each step")
    args = parser.parse_args(argv)
    reporter = _StepLines() if args.progress else None
    if reporter is not None:
        reporter.step()  # ready: the imports are done
    print(json.dumps(measure(args.sizes, args.device, progress=reporter)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

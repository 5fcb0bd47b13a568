"""How fast the device that runs a request is, measured once: the request budget and every time estimate scale by it.

The budget (:data:`attnviz.settings.REQUEST_HEAD_TOKENS`) and the seconds a capture is predicted to take
(:data:`attnviz.settings.SECONDS_PER_CELL`) were fitted on 2 CPU cores. On another device they would refuse or
ask to confirm work that takes a second there, so an accelerator's speed is measured once per process on a
reference capture (one layer's :func:`attnviz.core.capture.kernel.capture_attention`, synchronised, after a
warm-up), and compared with the same work's time on the 2 cores the constants came from
(:data:`REFERENCE_CPU_SECONDS`). A CPU is taken as the reference itself: its constants stay as measured.
"""

from __future__ import annotations

import functools
import time

REFERENCE_SHAPE = (8, 1024, 64)  # n_head, tokens, head_dim of the reference layer (8.4 M weights)
# the reference layer's capture on the 2 cores the constants were fitted on (best of 3, 0.073-0.12 s measured here)
REFERENCE_CPU_SECONDS = 0.070
MAX_SPEEDUP = 1000.0  # no estimate shrinks past this, whatever one noisy timing says


def reference_seconds(device: str, repeats: int = 3) -> float:
    """The reference capture's time on ``device`` (the best of ``repeats``, after one warm-up)."""
    import torch

    from attnviz.core.capture.kernel import capture_attention
    from attnviz.core.devices import synchronize
    from attnviz.core.masks import KeyRanges

    dev = torch.device(device)
    n_head, tokens, head_dim = REFERENCE_SHAPE
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(n_head, tokens, head_dim, generator=generator).to(dev) for _ in range(3))
    keys = KeyRanges.causal(tokens)
    best = float("inf")
    for attempt in range(repeats + 1):
        synchronize(dev)
        start = time.perf_counter()
        capture_attention(q, k, v, keys, scale=head_dim**-0.5, bin_size=8, keep_qk=False)
        synchronize(dev)
        if attempt:  # the first is the warm-up
            best = min(best, time.perf_counter() - start)
    return best


@functools.lru_cache(maxsize=8)
def speedup(device: str | None) -> float:
    """How many times faster than the reference CPU ``device`` runs a capture: 1.0 for a CPU (or None), else
    measured once per process, between 1 and :data:`MAX_SPEEDUP`."""
    if device is None or str(device).split(":")[0] == "cpu":
        return 1.0
    return min(MAX_SPEEDUP, max(1.0, REFERENCE_CPU_SECONDS / max(1e-9, reference_seconds(str(device)))))


def device_of(source) -> str | None:
    """Where a source's work runs ("cuda:0", "cpu"), or None when it does not say (then priced as the CPU)."""
    device = getattr(source, "device", None)
    return None if device is None else str(device)

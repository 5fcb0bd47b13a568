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

from attnviz.core.time_agreement import TIME_FACTOR

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


PROBE_SHAPE = (64, 576, 1536)  # tokens, d_model, d_ff: a feed-forward block of SmolLM2 on a short text
PROBE_SECONDS = 0.25  # a probe runs blocks for this long: long enough to average the scheduler's slices under load
PROBE_MAX_AGE_S = 3.0  # a probe is reused this long: a burst of reruns (each click) pays for one
_probes: dict[str, tuple[float, float]] = {}


def probe_seconds(device: str | None = None, budget_s: float = PROBE_SECONDS) -> float:
    """Seconds a block of fixed work takes on ``device`` (None: the CPU) now: blocks run for ``budget_s`` after a
    warm-up, the mean kept (not the best: under load the best is the moment another job paused). On a machine
    that other processes hold it takes longer, as every pass of a model does: the ratio of two probes is how much
    slower (or faster) the machine is now than when the first was taken."""
    import torch

    from attnviz.core.devices import synchronize

    dev = torch.device(device or "cpu")
    tokens, width, hidden = PROBE_SHAPE
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, width, generator=generator).to(dev)  # (T, d_model)
    up = torch.randn(width, hidden, generator=generator).to(dev)  # (d_model, d_ff)
    down = torch.randn(hidden, width, generator=generator).to(dev)  # (d_ff, d_model)
    (x @ up).relu() @ down  # the warm-up: kernels chosen, pages touched
    synchronize(dev)
    blocks, start = 0, time.perf_counter()
    while blocks == 0 or time.perf_counter() - start < budget_s:
        (x @ up).relu() @ down  # (T, d_ff) -> (T, d_model)
        synchronize(dev)
        blocks += 1
    return (time.perf_counter() - start) / blocks


def current_probe(device: str | None = None, clock=time.monotonic, max_age_s: float = PROBE_MAX_AGE_S) -> float:
    """:func:`probe_seconds` on ``device``, taken now or at most ``max_age_s`` ago."""
    name = str(device or "cpu")
    found = _probes.get(name)
    now = clock()
    if found is None or now - found[0] > max_age_s:
        found = (now, probe_seconds(device))
        _probes[name] = found
    return found[1]


def load_factor(then_s: float | None, now_s: float, within: float = TIME_FACTOR) -> float | None:
    """How many times longer work takes now than when ``then_s`` was probed: 1.0 while the ratio stays within
    ``within`` either way (the bound the project holds its time estimates to: a smaller change is the probe's own
    noise on a shared machine, not a change of the machine); None when nothing was probed then."""
    if then_s is None or then_s <= 0:
        return None
    ratio = now_s / then_s
    return 1.0 if 1 / within <= ratio <= within else ratio


def device_of(source) -> str | None:
    """Where a source's work runs ("cuda:0", "cpu"), or None when it does not say (then priced as the CPU)."""
    device = getattr(source, "device", None)
    return None if device is None else str(device)

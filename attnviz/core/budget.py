"""The request budget: what one capture may cost, priced before any work.

Every request, hosted or not, is priced: tokens x layers x heads against
:data:`attnviz.settings.REQUEST_HEAD_TOKENS`, the budget of SmolLM2's largest
request. The record grows linearly in it (capture's ``predicted_nbytes``) and
the time in it x tokens. A hosted server refuses a request over it; a local one
asks first. A training's time is estimated from its multiply-adds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnviz import settings
from attnviz.core.capture import predicted_nbytes
from attnviz.core.device_speed import speedup
from attnviz.i18n.message import msg


@dataclass(frozen=True)
class RequestCost:
    """What one capture will cost, priced before it runs.

    head_tokens: tokens x layers x heads, against ``budget``; peak_bytes and seconds are estimates of the whole
    process's peak memory and the capture's time (fitted on ``benchmarks/capture.py``, 2 CPU cores).
    """

    tokens: int
    n_layer: int
    n_head: int
    head_tokens: int
    budget: int
    peak_bytes: int
    seconds: float

    @property
    def over(self) -> bool:
        return self.head_tokens > self.budget

    @property
    def max_tokens(self) -> int:
        """The most tokens this model's layers x heads may read within the budget."""
        return self.budget // (self.n_layer * self.n_head)

    @property
    def max_layer_heads(self) -> int:
        """The most layers x heads that may read this many tokens within the budget."""
        return self.budget // max(1, self.tokens)

    @property
    def peak_gb(self) -> float:
        return self.peak_bytes / 1e9


def request_cost(
    n_layer: int,
    n_head: int,
    n_kv_head: int,
    head_dim: int,
    tokens: int,
    budget: int | None = None,
    device: str | None = None,
) -> RequestCost:
    """Price a capture of ``tokens`` tokens through ``n_layer`` x ``n_head`` heads on ``device`` (None: the CPU the
    constants were fitted on); ValueError on a size below 1. On an accelerator the seconds shrink and the default
    budget grows by its measured speed-up (:func:`attnviz.core.device_speed.speedup`, measured once a process)."""
    for name, value in (("n_layer", n_layer), ("n_head", n_head), ("n_kv_head", n_kv_head), ("head_dim", head_dim)):
        if value < 1:
            raise ValueError(msg("model_errors.at_least_one", name=name, value=value))
    tokens = max(1, tokens)
    fast = speedup(device)
    budget = int(settings.REQUEST_HEAD_TOKENS * fast) if budget is None else budget
    record = predicted_nbytes(n_layer, n_head, n_kv_head, head_dim, tokens)
    cells = tokens * tokens * n_layer * n_head  # every head's (T, T) scores
    return RequestCost(
        tokens=tokens,
        n_layer=n_layer,
        n_head=n_head,
        head_tokens=tokens * n_layer * n_head,
        budget=budget,
        peak_bytes=settings.PEAK_BASE_BYTES + math.ceil(settings.PEAK_RECORD_FACTOR * record),
        seconds=cells * settings.SECONDS_PER_CELL / fast,
    )


ACTIVATION_WIDTHS = 12  # a layer's forward holds about this many (tokens x d_model) float32 tensors at its peak


def device_nbytes(
    n_layer: int, n_head: int, n_kv_head: int, head_dim: int, tokens: int, all_weights: bool = False
) -> int:
    """The accelerator memory a capture works in, beside the model's weights: the kernel's two score buffers (a
    chunk of at most ``DEVICE_CHUNK_ELEMENTS`` float32 cells each), one layer's capture before it moves to the
    host, q, k and v in float32, and the layer's activations; with ``all_weights`` (the eager route, whose model
    returns every layer's (n_head, T, T) weights at once) those weights in float32 too."""
    from attnviz.core.capture.kernel import DEVICE_CHUNK_ELEMENTS

    buffers = 2 * min(n_head * tokens * tokens, DEVICE_CHUNK_ELEMENTS) * 4
    one_layer = predicted_nbytes(1, n_head, n_kv_head, head_dim, tokens)
    qkv = (n_head + 2 * n_kv_head) * tokens * head_dim * 4
    activations = ACTIVATION_WIDTHS * tokens * n_head * head_dim * 4
    weights = n_layer * n_head * tokens * tokens * 4 if all_weights else 0
    return buffers + one_layer + qkv + activations + weights


def training_seconds(macs: int) -> float:
    """The Training page's estimate of a training's time from its multiply-adds (2 CPU cores)."""
    return macs / 1e12 * settings.TRAIN_SECONDS_PER_TMAC

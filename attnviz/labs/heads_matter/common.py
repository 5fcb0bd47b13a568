"""What the "which heads matter" labs share: a head's name, how a number is written in their JSON, a mean that is
None over nothing, the tokens a lab reads, how many rows one batched pass may hold, and how a lab's price is stated
(:func:`lab_need`: host bytes, device bytes and seconds on the source's device, beside each lab's code)."""

from __future__ import annotations

import math

from torch import Tensor

from attnviz.core.admission import Need
from attnviz.core.budget import request_cost
from attnviz.core.device_speed import device_of
from attnviz.models.ablation import Head
from attnviz.settings import ABLATION_TOKENS

PASS_BYTES = 256 * 2**20  # the outputs one batched pass may hold: R x T x width x 4 B
PASS_ROWS = 16  # and at most this many rows a pass (an encoder's narrow outputs would allow hundreds)
PROBES = 2  # an encoder's estimate: random directions of the last hidden states (one backward over as many rows)
BACKWARD_PASSES = 2.0  # a backward costs about two forwards: its matmuls run against both inputs and weights


def rounded(value: float | None) -> float | None:
    """A number as the CLI's JSON and the pages' tables write it: 8 decimals; None for None or NaN."""
    return None if value is None or math.isnan(value) else round(float(value), 8)


def mean_or_none(values: Tensor) -> float | None:
    """The mean of ``values`` as a float, None when there are none (a single token has no next-token positions)."""
    return float(values.mean()) if values.numel() else None


def token_limit(max_tokens: int, limit: int = ABLATION_TOKENS) -> int:
    """The tokens a lab reads: the sidebar's (or --max-tokens) cut to the lab's own ``limit``."""
    return max(1, min(max_tokens, limit))


def rows_per_pass(n_tokens: int, width: int, limit: int = PASS_BYTES) -> int:
    """How many rows (an ablation or a patch each) one batched pass holds: within ``limit`` bytes of outputs
    (n_tokens x width x 4 B each), and at most PASS_ROWS."""
    return max(1, min(PASS_ROWS, limit // max(1, n_tokens * width * 4)))


def estimate_bytes(source, n_tokens: int) -> int:
    """A predicted peak for an estimate: a forward's activations kept for the backward (every layer's stream, its
    attention's and MLP's intermediates, the weights of each head for the fused path's backward), in float32, for
    PROBES rows, and the logits with their float64 log-softmax and gradient."""
    T = max(1, n_tokens)
    layers = source.n_layer * T * (24 * source.d_model + 3 * source.n_head * T) * 4
    vocab = getattr(getattr(source, "config", None), "vocab_size", 0) or 0
    return PROBES * layers + 3 * T * vocab * 8


def lab_need(source, nbytes: int, n_tokens: int, passes: float, seconds: float | None = None) -> Need:
    """What one request of a lab costs on ``source``'s device (:class:`~attnviz.core.admission.Need`): ``nbytes`` at
    its peak on the host and, on an accelerator, in its memory too, where the passes' tensors live (on the host
    then an upper bound: only reductions cross); ``seconds`` when the lab timed its passes here, else ``passes``
    forward passes of ``n_tokens`` tokens, each priced as a capture of them on that device
    (:func:`attnviz.core.budget.request_cost`, the capture's own price)."""
    device = device_of(source)
    if seconds is None:
        # a capture's seconds count its heads' score cells alone: its K/V heads and head_dim price bytes, unused here
        cost = request_cost(source.n_layer, source.n_head, source.n_head, 1, max(1, n_tokens), device=device)
        seconds = passes * cost.seconds
    on_device = nbytes if device is not None and device.split(":")[0] != "cpu" else 0
    return Need(int(nbytes), float(seconds), int(on_device), device)


__all__ = [
    "BACKWARD_PASSES",
    "PASS_BYTES",
    "PASS_ROWS",
    "PROBES",
    "Head",
    "estimate_bytes",
    "lab_need",
    "mean_or_none",
    "rounded",
    "rows_per_pass",
    "token_limit",
]

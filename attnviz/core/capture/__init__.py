"""Attention captured in bounded memory, one query chunk at a time, as FlashAttention tiles the softmax.

A full record of every weight is (n_layer, n_head, T, T): 283 MB for SmolLM2 at
512 tokens and about 72 GB at 8,192. The weights are never all needed at
once, so each layer is computed in chunks of query rows and reduced as it goes.
What is kept, per layer, at full float32 precision:

- every per-row statistic of every head (:data:`ROW_STATS`): O(n_head · T);
- the log-sum-exp of every row, so any single weight is ``exp(q·k·scale - lse)``;
- pooled maps at display resolution, max- and mean-pooled, at most
  :data:`~attnviz.core.capture.layer.POOL_SIDE` cells a side per head (and the max-pooled mean over heads);
- the layer's q and k after rotation (exactly what entered the softmax), so any
  head, or any window of one, is recomputed at full resolution on demand
  (:func:`weights_window`): O(T · (n_head + n_kv_head) · head_dim);
- the mask the layer really applied, as :class:`attnviz.core.masks.KeyRanges` (O(T)).

A model with learned attention sinks (gpt-oss' ``s_aux``: one logit per head
that joins every row's softmax denominator but has no value) is captured with
them: its rows sum to 1 minus the sink's share, kept as the row statistic
``sink_weight``. A model whose attention only its own eager code can compute is
captured from the full weights that code returns (:func:`capture_weights`):
bounded by the caller, since those weights are O(T²) per head, and kept, so
windows are read from them instead of from q and k.

The output ``weights · v`` is computed from the same chunks, so a model whose
attention runs through :func:`capture_attention` computes what its eager
attention would (to float32 rounding), and the pages show weights from the
very pass that produced the model's outputs.

The package, one idea a module, each importing only those above it:

- :mod:`~attnviz.core.capture.layer`: what one layer's capture keeps (:class:`LayerCapture`), the pooling bin
  and the bytes a model's captures will hold before it runs;
- :mod:`~attnviz.core.capture.kernel`: computing a capture, chunk by chunk (:func:`capture_attention`), or
  from the full weights of a model's eager attention (:func:`capture_weights`);
- :mod:`~attnviz.core.capture.fused`: a statistics pass's route (:func:`fused_attention`): every row statistic and
  the output from torch's fused kernel's log-sum-exp with augmented values, no pooled maps, where a layer's mask
  allows it;
- :mod:`~attnviz.core.capture.reading`: reading a capture back at full resolution (:func:`weights_window`,
  :func:`head_scores`);
- :mod:`~attnviz.core.capture.session`: one forward pass captured layer by layer, for each sequence of a batch
  (:class:`CaptureSession`).
"""

from attnviz.core.capture.fused import fused_attention, fused_route
from attnviz.core.capture.kernel import capture_attention, capture_weights
from attnviz.core.capture.layer import (
    FULL_VIEW_TOKENS,
    ROW_STATS,
    SINK_STAT,
    LayerCapture,
    pool_bin,
    pooled_counts,
    predicted_nbytes,
)
from attnviz.core.capture.reading import WINDOW_CELLS, head_scores, weights_window
from attnviz.core.capture.session import CaptureSession

__all__ = [
    "FULL_VIEW_TOKENS",
    "ROW_STATS",
    "SINK_STAT",
    "WINDOW_CELLS",
    "CaptureSession",
    "LayerCapture",
    "capture_attention",
    "capture_weights",
    "fused_attention",
    "fused_route",
    "head_scores",
    "pool_bin",
    "pooled_counts",
    "predicted_nbytes",
    "weights_window",
]

"""A cross-attention layer's capture: target queries over source keys, from the full weights the model returned.

The pooled maps and row statistics are those of :func:`~attnviz.core.capture.kernel.capture_weights`, except
the statistics that read a query's own position among the keys (previous token, self, distance): across two texts
they mean nothing, and :mod:`attnviz.core.alignment`'s ``alignment_offset`` takes their place.
"""

from __future__ import annotations

import dataclasses

from torch import Tensor

from attnviz.core.alignment import CROSS_ROW_STATS, alignment_offset
from attnviz.core.capture.kernel import capture_weights
from attnviz.core.capture.layer import LayerCapture
from attnviz.core.masks import KeyRanges


def capture_cross(weights: Tensor, n_source: int, *, bin_size: int, scale: float) -> LayerCapture:
    """One cross-attention layer of one sequence: weights (n_head, T, S), of which the first ``n_source`` keys are
    real source tokens (the rest pads, weight 0) -> its :class:`LayerCapture` (weights kept, rows
    :data:`~attnviz.core.alignment.CROSS_ROW_STATS`)."""
    T, S = weights.shape[-2:]
    capture = capture_weights(weights, KeyRanges.span(T, 0, n_source, k_len=S), bin_size=bin_size, scale=scale)
    rows = {name: capture.rows[name] for name in CROSS_ROW_STATS if name in capture.rows}
    rows["alignment_offset"] = alignment_offset(capture.weights, n_source)
    return dataclasses.replace(capture, rows=rows)  # its nbytes counted anew

"""What a capture keeps of one layer, and how large the captures of a whole model will be before it runs.

A :class:`LayerCapture` holds every row statistic of every head (:data:`ROW_STATS`), pooled maps at the bin
:func:`pool_bin` picks for the display, the mask the layer applied and, when asked, q and k: never the full
(n_head, T, T) weights, except for a capture built from them (the eager route).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from attnviz.core.masks import KeyRanges

ROW_STATS = (
    "entropy",
    "max_weight",
    "first_token_weight",
    "prev_token_weight",
    "self_weight",
    "mean_distance",
    "lse",
)
SINK_STAT = "sink_weight"  # a row statistic only layers with learned attention sinks have
POOL_SIDE = 256  # pooled maps have at most this many cells a side (the pooled large view)
GRID_SIDE = 64  # ... and this many when only the grid's tiles need them
FULL_VIEW_TOKENS = 384  # up to this many tokens a head is drawn whole at full resolution (589 kB of float32)
POOL_CELL_BUDGET = 24 * 2**20  # cells per pooled-map kind over all heads of all layers (96 MB in float32)


def pool_bin(q_len: int, n_heads_total: int) -> int:
    """Tokens per pooled cell (a side), so that pooled maps are at display resolution and no more.

    A head short enough for the full-resolution view needs pooled maps only for
    the grid's tiles (GRID_SIDE cells a side); a longer one is drawn pooled
    (POOL_SIDE). All ``n_heads_total`` heads together stay within POOL_CELL_BUDGET cells.
    """
    side = GRID_SIDE if q_len <= FULL_VIEW_TOKENS else POOL_SIDE
    side = min(side, max(1, math.isqrt(POOL_CELL_BUDGET // max(1, n_heads_total))))
    return max(1, math.ceil(q_len / side))


def pooled_counts(keys: KeyRanges, bin_size: int) -> Tensor:
    """How many visible cells each pooled bin holds: (ceil(q_len / b), ceil(k_len / b)) float32."""
    q_len, k_len = keys.q_len, keys.k_len
    n_q, n_k = math.ceil(q_len / bin_size), math.ceil(k_len / bin_size)
    starts = torch.arange(n_k) * bin_size  # (n_k,)
    ends = (starts + bin_size).clamp(max=k_len)
    overlap = torch.minimum(keys.hi[:, None], ends) - torch.maximum(keys.lo[:, None], starts)  # (q_len, n_k)
    overlap = F.pad(overlap.clamp_min(0).float(), (0, 0, 0, n_q * bin_size - q_len))  # (n_q * b, n_k)
    return overlap.view(n_q, bin_size, n_k).sum(dim=1)  # (n_q, n_k)


def predicted_nbytes(
    n_layer: int,
    n_head: int,
    n_kv_head: int,
    head_dim: int,
    q_len: int,
    keep_qk: bool = True,
    value_norms: bool = True,
) -> int:
    """What the captures of a whole model will hold for ``q_len`` tokens, in bytes, before running it.

    Per layer: the row statistics (n_head x q_len each), three pooled maps at the
    bin :func:`pool_bin` picks, the mask's two integers a row, and q and k; with
    ``value_norms`` (the default: an upper bound either way), each key's value
    norm per head and the row statistic ``low_norm_weight``.
    """
    b = pool_bin(q_len, n_layer * n_head)
    cells = math.ceil(q_len / b) ** 2
    per_layer = len(ROW_STATS) * n_head * q_len * 4 + (2 * n_head + 1) * cells * 4 + 2 * q_len * 8
    if value_norms:
        per_layer += 2 * n_head * q_len * 4
    if keep_qk:
        per_layer += (n_head + n_kv_head) * q_len * head_dim * 4
    return n_layer * per_layer


@dataclass
class LayerCapture:
    """What one layer's attention did to one sequence, in bounded memory (all on the CPU).

    rows: {name: (n_head, q_len)} for each of :data:`ROW_STATS` (NaN where a
    statistic has no meaning, e.g. the previous token of row 0).
    pooled_max, pooled_mean: (n_head, P, Pk) with P = ceil(q_len / bin_size);
    bins that hold no visible cell are NaN. mean_pooled_max: (P, Pk), the
    max-pooled mean over heads.
    q: (n_head, q_len, head_dim) and k: (n_kv_head, k_len, head_dim), float32,
    or None when the capture was asked not to keep them (or never saw them).
    weights: (n_head, q_len, k_len), only for a capture built from full weights
    (:func:`capture_weights`); its ``lse`` row is NaN.
    sinks: (n_head,) the learned sink logits, for a layer that has them; its
    rows then include ``sink_weight``.
    value_norms: (n_head, k_len), ‖v_j W_O^h‖ of every key for every query head
    (attnviz.core.value_norms), when the capture was given the layer's output
    projection; its rows then include ``low_norm_weight``.
    route: how the layer was captured: "reference" (:func:`capture_attention`, chunk by chunk), "eager" (from
    the full weights a model's own attention returned, :func:`capture_weights`) or "fused" (statistics only,
    from a fused kernel's log-sum-exp, :mod:`attnviz.core.capture.fused`: its pooled maps are left empty).
    """

    rows: dict[str, Tensor]
    pooled_max: Tensor
    pooled_mean: Tensor
    mean_pooled_max: Tensor
    keys: KeyRanges
    bin_size: int
    scale: float
    softcap: float | None = None
    q: Tensor | None = None
    k: Tensor | None = None
    weights: Tensor | None = None
    sinks: Tensor | None = None
    value_norms: Tensor | None = None
    route: str = "reference"
    nbytes: int = field(init=False)

    def __post_init__(self) -> None:
        tensors = [*self.rows.values(), self.pooled_max, self.pooled_mean, self.mean_pooled_max]
        kept = (self.q, self.k, self.weights, self.sinks, self.value_norms, self.keys.lo, self.keys.hi)
        tensors += [t for t in kept if t is not None]
        self.nbytes = sum(t.numel() * t.element_size() for t in tensors)

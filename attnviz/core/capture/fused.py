"""A layer's row statistics and output from torch's fused attention kernel, without the reference's exp passes.

torch's fused CPU kernel (``_scaled_dot_product_flash_attention_for_cpu``) returns each row's log-sum-exp
beside the output. Every statistic but one is linear in the weights or a single weight, so it comes from that
kernel with augmented values, never from a row of exponentials we form ourselves:

- entropy = lse - E[s], with E[s] = scale · q · (Σ_j w_j k_j): k rides in the values;
- mean distance: one more value column, first - j (keys before a chunk of rows) or j - last (after it), plus
  the part's share of the weight (from its lse) times the row's offset from first or last: terms that are never
  negative, so nothing large cancels at 8,192 tokens (the reference's ``_far_columns``); the chunk's own C x C
  diagonal block is weighted explicitly;
- self, previous- and first-token weights: exp(q·k·scale - lse), one dot product a row;
- sink weight: exp(sink - lse); low-norm weight: one more value column per head (the key is small or not).

The row max (``max_weight``) is the one that no fused kernel returns. It is computed our own way: the chunk's
scores q·kᵀ·scale and their max over each row, with no exp and no mask (the far keys are all visible), the
diagonal block's from the block itself. Q, K and V must share a head size in torch's kernel, so q and k are
zero-padded to the augmented values' width (a zero adds nothing to q·k).

Only the row statistics are kept (no pooled maps, no q or k): the route serves a statistics pass
(:class:`~attnviz.core.capture.session.CaptureSession` with ``statistics_only``). It is taken per layer where the
mask is one the kernel can apply by key ranges: causal from position 0 (queries are the keys' positions), every
key, or the first ``n`` keys (right padding, causal or not); no soft-capping. Anything else takes the reference
(:func:`~attnviz.core.capture.kernel.capture_attention`). A statistics pass takes the route only where
:data:`STATISTICS_ROUTE` says so: on this CPU it measured slower than the reference (the numbers are beside it),
so by default it is the reference that runs, and this route is the checked alternative. On CUDA the route is
not taken: the efficient kernel's ``compute_log_sumexp`` would serve (``_scaled_dot_product_efficient_attention``;
on meta tensors its lse comes back padded to a multiple of 32 rows, to be cut), untested here (no GPU), so CUDA
stays on the reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from attnviz.core.attention import group_size
from attnviz.core.capture.kernel import _diagonals, _fill_dead_rows, _small
from attnviz.core.capture.layer import ROW_STATS, SINK_STAT, LayerCapture
from attnviz.core.masks import KeyRanges
from attnviz.core.value_norms import LOW_NORM_STAT, value_norms

FUSED_CHUNK_ROWS = 256  # rows a chunk: its diagonal block is weighted explicitly; the fastest of 128-1,024 measured
# Which route a statistics pass takes where the fused one applies. Measured on this CPU (one layer of SmolLM2's shape,
# one thread, interleaved in one process): the reference 0.27 s / 3.44 s at 2,048 / 8,192 tokens, this route
# 0.39 s / 5.21 s, torch's own fused attention 0.10 s / 1.48 s. The zero-padded q and k double the kernel's q·k work
# (130 columns where 64 carry it) and the row max is one more q·kᵀ, so the route does more arithmetic than the
# reference, whose cost is its two matmuls too. So a statistics pass keeps the reference unless this is "fused".
STATISTICS_ROUTE = "reference"


def fused_segments(keys: KeyRanges) -> list[tuple[int, int, int, bool]] | None:
    """The mask as runs of rows the fused kernel can apply: (r0, r1, c, causal), rows r0..r1-1 seeing keys
    0..c-1 (``causal``: only up to their own position); None when it is not such a mask (the reference's then).

    Queries must sit at the keys' positions (q_len == k_len) and every row's keys must start at key 0: causal,
    every key, or the first n keys of a right-padded row (its pad rows then see those n keys).
    """
    q_len, k_len = keys.q_len, keys.k_len
    if q_len != k_len or q_len == 0 or bool((keys.lo != 0).any()):
        return None
    hi = keys.hi
    if bool((hi == hi[0]).all()):  # every row the same first c keys (none: every row dead)
        return [(0, q_len, int(hi[0]), False)]
    n = int(hi.max())
    causal = torch.clamp(torch.arange(1, q_len + 1), max=n)
    if bool((hi == causal).all()):
        return [(0, n, n, True), *([(n, q_len, n, False)] if n < q_len else [])]
    return None


def fused_route(keys: KeyRanges, softcap: float | None, device: torch.device) -> bool:
    """Whether a layer with this mask, soft-capping and device can take the fused route (see the module): a
    statistics pass takes it where this holds and :data:`STATISTICS_ROUTE` is "fused"."""
    return device.type == "cpu" and softcap is None and fused_segments(keys) is not None


def _flash(q: Tensor, k: Tensor, v: Tensor, scale: float) -> tuple[Tensor, Tensor]:
    """torch's fused kernel, no mask: q (H, C, D), k and v (H, W, D) -> out (H, C, D), lse (H, C)."""
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q[None], k[None], v[None], 0.0, False, attn_mask=None, scale=scale
    )
    return out[0], lse[0]


@dataclass
class _Layer:
    """One layer's tensors as the chunks read them, float32: q (H, T, hd), k and v repeated to every query head
    (H, T, hd) and (H, T, v_dim); the augmented values (H, T, D) = [v | k | distance | small key] and q, k
    zero-padded to D; each key's position."""

    q: Tensor
    k: Tensor
    v: Tensor
    q_pad: Tensor
    k_pad: Tensor
    values: Tensor
    positions: Tensor
    scale: float
    sink: Tensor | None  # (H, 1)

    @property
    def dist(self) -> int:
        """The distance column of the augmented values (after v and k); the small-key column follows it."""
        return self.v.shape[-1] + self.k.shape[-1]


@torch.no_grad()
def fused_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    keys: KeyRanges,
    *,
    scale: float,
    sinks: Tensor | None = None,
    out_factors: Tensor | None = None,
    seen_keys_only: bool = False,
) -> tuple[Tensor, LayerCapture]:
    """One layer's output and row statistics for one sequence by the fused route (a mask :func:`fused_segments`
    reads): q (n_head, T, hd), k (n_kv_head, T, hd), v (n_kv_head, T, v_dim) -> output (n_head, T, v_dim) in q's
    dtype and a :class:`LayerCapture` of route "fused" holding every row of :data:`ROW_STATS` (with
    ``sink_weight`` and ``low_norm_weight`` as :func:`capture_attention` has them); its pooled maps are empty.
    """
    segments = fused_segments(keys)
    if segments is None:
        raise ValueError("the fused route applies a causal, full or key-padding mask from key 0; use the reference")
    n_head, q_len, head_dim = q.shape
    n_kv_head, k_len, _ = k.shape
    n_rep = group_size(n_head, n_kv_head)
    v_dim = v.shape[-1]
    names = (*ROW_STATS, *((SINK_STAT,) if sinks is not None else ()))
    names += (LOW_NORM_STAT,) if out_factors is not None else ()
    rows = {name: torch.full((n_head, q_len), math.nan) for name in names}
    qf = q.detach().float()  # (H, T, hd)
    kf = k.detach().float().repeat_interleave(n_rep, dim=0)  # (H, T, hd): each query head's keys (GQA)
    vf = v.detach().float().repeat_interleave(n_rep, dim=0)  # (H, T, v_dim)
    norms = None if out_factors is None else value_norms(v, out_factors)  # (H, T)
    dist = v_dim + head_dim
    values = torch.empty(n_head, k_len, dist + 1 + (norms is not None))  # [v | k | distance | small key]
    values[..., :v_dim], values[..., v_dim:dist], values[..., dist] = vf, kf, 0.0
    if norms is not None:
        values[..., dist + 1] = _small(norms, keys, seen_keys_only)
    width = values.shape[-1]
    layer = _Layer(
        q=qf,
        k=kf,
        v=vf,
        q_pad=F.pad(qf, (0, width - head_dim)),  # (H, T, D): zeros add nothing to q·k
        k_pad=F.pad(kf, (0, width - head_dim)),
        values=values,
        positions=torch.arange(k_len, dtype=torch.float32),
        scale=float(scale),
        sink=None if sinks is None else sinks.detach().float().view(n_head, 1),
    )
    out = torch.zeros(n_head, q_len, v_dim)
    for s0, s1, c, causal in segments:
        if c == 0:  # rows that see no key: zero weights, zero output
            _fill_dead_rows(rows, s0, s1, torch.arange(s0, s1))
            continue
        for r0 in range(s0, s1, FUSED_CHUNK_ROWS):
            _chunk(layer, rows, out, r0, min(s1, r0 + FUSED_CHUNK_ROWS), c, causal)
    capture = LayerCapture(
        rows=rows,
        pooled_max=torch.zeros(n_head, 0, 0),
        pooled_mean=torch.zeros(n_head, 0, 0),
        mean_pooled_max=torch.zeros(0, 0),
        keys=keys,
        bin_size=max(1, q_len),
        scale=float(scale),
        sinks=sinks,
        value_norms=norms,
        route="fused",
    )
    return out.to(q.dtype), capture


def _chunk(layer: _Layer, rows: dict[str, Tensor], out: Tensor, r0: int, r1: int, c: int, causal: bool) -> None:
    """Rows r0..r1-1 over keys 0..c-1: the keys before and after the chunk through the fused kernel, the chunk's
    own diagonal block explicitly, merged by log-sum-exp."""
    q, k, values, positions, scale = layer.q[:, r0:r1], layer.k, layer.values, layer.positions, layer.scale
    v_dim, dist, small = layer.v.shape[-1], layer.dist, layer.dist + 1
    first, last = r0, r1 - 1
    n0, n1 = min(r0, c), min(r1, c)  # the diagonal block: keys r0..r1-1 that exist
    q_pos = torch.arange(r0, r1, dtype=torch.float32)  # (C,)
    far = []  # (augmented (H, C, D) normalised within the part, lse (H, C), the rows' offset (C,))
    if n0 > 0:  # keys before the chunk: every row sees them all; |i - j| = (i - first) + (first - j)
        values[:, :n0, dist] = first - positions[:n0]
        far.append((*_flash(layer.q_pad[:, r0:r1], layer.k_pad[:, :n0], values[:, :n0], scale), q_pos - first))
    if not causal and c > n1:  # keys after it: |i - j| = (last - i) + (j - last)
        values[:, n1:c, dist] = positions[n1:c] - last
        far.append((*_flash(layer.q_pad[:, r0:r1], layer.k_pad[:, n1:c], values[:, n1:c], scale), last - q_pos))
    near = torch.matmul(q, k[:, n0:n1].transpose(-2, -1)).mul_(scale)  # (H, C, Wn)
    if causal:
        near.masked_fill_(positions[None, n0:n1] > q_pos[:, None], -math.inf)
    row_max = near.amax(dim=-1) if n1 > n0 else torch.full(near.shape[:2], -math.inf)  # (H, C)
    # the far keys' row max: their scores' max with no exp and no mask (all are visible); no fused kernel gives it
    for j0, j1 in ((0, n0), (0, 0) if causal else (n1, c)):
        if j1 > j0:
            row_max = torch.maximum(row_max, torch.matmul(q, k[:, j0:j1].transpose(-2, -1)).amax(dim=-1).mul_(scale))
    near_lse = near.logsumexp(dim=-1) if n1 > n0 else torch.full(near.shape[:2], -math.inf)
    lse_keys = torch.logsumexp(torch.stack([near_lse, *(part_lse for _, part_lse, _ in far)]), dim=0)  # (H, C)
    lse = lse_keys if layer.sink is None else torch.logaddexp(lse_keys, layer.sink)
    w = torch.exp(near - lse[..., None])  # (H, C, Wn): the block's weights, 0 where masked
    aug = torch.matmul(w, values[:, n0:n1])  # (H, C, D): its v, k, (distance: unused) and small-key sums
    distance = (w * (q_pos[:, None] - positions[None, n0:n1]).abs()).sum(dim=-1)  # (H, C)
    for part, part_lse, offset in far:
        share = torch.exp(part_lse - lse)[..., None]  # (H, C, 1): the part's share of the row's weight
        aug.add_(part * share)
        distance += share[..., 0] * offset + share[..., 0] * part[..., dist]
    out[:, r0:r1] = aug[..., :v_dim]
    e_s = (q * aug[..., v_dim:dist]).sum(dim=-1) * scale  # (H, C): Σ_j w_j s_j = scale · q · Σ_j w_j k_j
    rows["lse"][:, r0:r1] = lse
    rows["entropy"][:, r0:r1] = lse * torch.exp(lse_keys - lse) - e_s  # -Σ_j w_j log w_j over the keys
    rows["max_weight"][:, r0:r1] = torch.exp(row_max - lse)
    rows["mean_distance"][:, r0:r1] = distance
    if layer.sink is not None:
        rows[SINK_STAT][:, r0:r1] = torch.exp(layer.sink - lse)
    if LOW_NORM_STAT in rows:
        rows[LOW_NORM_STAT][:, r0:r1] = aug[..., small]
    rows_at = torch.arange(r0, r1)
    for name, key in _diagonals(rows_at):  # one weight each: exp(q·k·scale - lse)
        seen = (key >= 0) & (key < c) & ((key <= rows_at) if causal else True)
        s = (q * k[:, key.clamp(0, k.shape[1] - 1)]).sum(dim=-1) * scale  # (H, C)
        rows[name][:, r0:r1] = torch.where(key >= 0, torch.where(seen, torch.exp(s - lse), 0.0), math.nan)

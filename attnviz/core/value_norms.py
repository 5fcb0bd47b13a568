"""Value-weighted attention (Kobayashi et al. 2020, "Attention is not only a weight"): what a head moves, not only where it looks.

Head h's output at query i is Σ_j α_ij · v_j W_O^h: the weight α_ij scales the
vector f_h(v_j) = v_j W_O^h that key j contributes to the residual stream. A
head can put most of its weight on a key whose f_h(v_j) is near zero (a
"sink": typically the first token) and so contribute almost nothing there.
The value-weighted map ‖α_ij · v_j W_O^h‖ = α_ij · n_hj shows what arrives.

Only the norms n_hj = ‖v_j W_O^h‖ are stored: (n_head, k_len) per layer, O(T).
Any window of the value-weighted map is the weights window times the norms of
its keys (:func:`value_weighted`), never a stored T x T map. The output
projection's bias is added once to the sum over heads, not per key, so it is
not part of f_h (as in the paper).

Norms are computed exactly and cheaply: with the reduced QR factorisation
(W_O^h)ᵀ = Q R (Q orthonormal columns), ‖v W_O^h‖ = ‖v Rᵀ‖, so each key costs
head_dim² per head instead of head_dim·d_model, and no cancellation (as in
vᵀ G v with a Gram matrix) loses a small norm to float32 rounding.

The head statistic ``low_norm_weight``: the share of a row's weight on keys
whose norm is small, below :data:`LOW_NORM_FRACTION` (a quarter) of the head's
median norm over the text's keys, averaged over rows like the other statistics.
A sink head scores near 1: its weight lands where nothing is carried.
"""

from __future__ import annotations

import torch
from torch import Tensor

LOW_NORM_FRACTION = 0.25  # a key's value is "small" below this fraction of the head's median norm
LOW_NORM_STAT = "low_norm_weight"  # the row statistic: weight on keys with small values


def projection_factors(blocks: Tensor) -> Tensor:
    """W_O^h (n_head, head_dim, d_model) -> factors F_h (n_head, head_dim, r), r = min(head_dim, d_model), float32
    on the blocks' device whatever their dtype.

    ‖x @ W_O^h‖ = ‖x @ F_h‖ for every x (head_dim,): F_h = Rᵀ of the reduced QR of (W_O^h)ᵀ.
    """
    if blocks.ndim != 3:
        raise ValueError(f"W_O blocks must be (n_head, head_dim, d_model), got {tuple(blocks.shape)}")
    # once per layer, on the CPU in float64 whatever the model runs in and on: float64 keeps the factor exact to
    # float32's last bit, and MPS has neither float64 nor a QR
    wide = blocks.detach().to("cpu", torch.float64)
    _, r = torch.linalg.qr(wide.transpose(-2, -1), mode="r")  # (n_head, r, head_dim); Q is not needed

    return r.transpose(-2, -1).to(blocks.device, torch.float32).contiguous()  # (n_head, head_dim, r)


def value_norms(v: Tensor, factors: Tensor) -> Tensor:
    """‖v_j W_O^h‖ for every query head h and key j: v (n_kv_head, k_len, head_dim) -> (n_head, k_len) float32.

    Query head h reads kv head h // (n_head / n_kv_head), as repeat_kv gives it (GQA, MQA).
    """
    n_kv_head, k_len, head_dim = v.shape
    n_head = factors.shape[0]
    if n_head % max(1, n_kv_head) or factors.shape[1] != head_dim:
        raise ValueError(
            f"{n_head} heads of factors {tuple(factors.shape)} do not fit values (n_kv_head={n_kv_head}, head_dim={head_dim})"
        )
    n_rep = n_head // n_kv_head
    v = v.detach().float().to(factors.device)
    grouped = factors.view(n_kv_head, n_rep, head_dim, -1)  # (n_kv_head, n_rep, hd, r)
    moved = torch.einsum("gkd,grdc->grkc", v, grouped)  # (n_kv_head, n_rep, k_len, r)
    return torch.linalg.vector_norm(moved, dim=-1).reshape(n_head, k_len)  # (n_head, k_len)


def small_keys(norms: Tensor, fraction: float = LOW_NORM_FRACTION) -> Tensor:
    """Keys whose norm is below ``fraction`` of their head's median: norms (n_head, k_len) -> float 0/1 (n_head, k_len)."""
    if norms.shape[-1] == 0:
        return torch.zeros_like(norms)
    median = norms.median(dim=-1, keepdim=True).values  # (n_head, 1)
    return (norms < fraction * median).float()


def value_weighted(weights: Tensor, norms: Tensor) -> Tensor:
    """‖α_ij · v_j W_O^h‖ = α_ij · n_hj: weights (..., rows, cols) and norms of those keys (..., cols) -> (..., rows, cols)."""
    if norms.shape[-1] != weights.shape[-1]:
        raise ValueError(f"{norms.shape[-1]} key norms for a window of {weights.shape[-1]} keys")
    return weights * norms[..., None, :].to(weights.dtype)


def low_norm_weight(weights: Tensor, small: Tensor) -> Tensor:
    """Each row's weight on small-norm keys: weights (n_head, rows, cols), small (n_head, cols) -> (n_head, rows)."""
    return torch.bmm(weights, small[..., None].to(weights.dtype))[..., 0]


def small_columns(small: Tensor, n_kv_head: int) -> Tensor:
    """Small-key indicators (n_head, k_len) as columns beside each kv head's values: (n_kv_head, k_len, n_rep).

    The capture multiplies its weights by v with these n_rep columns appended, so each row's weight on small
    keys comes out of the matmul it already runs (a separate pass over the weights cost 10% of a layer):
    query head h = g·n_rep + r reads column r of kv head g (:func:`picked_columns`).
    """
    n_head, k_len = small.shape
    return small.view(n_kv_head, n_head // n_kv_head, k_len).transpose(1, 2)  # (n_kv_head, k_len, n_rep)


def picked_columns(products: Tensor, n_kv_head: int) -> Tensor:
    """Weights times :func:`small_columns`, (n_head, C, n_rep) -> each head's own column, (n_head, C)."""
    n_head, chunk, n_rep = products.shape
    grouped = products.view(n_kv_head, n_rep, chunk, n_rep)  # (n_kv_head, r of the head, C, r of the column)
    own = torch.diagonal(grouped, dim1=1, dim2=3)  # (n_kv_head, C, n_rep)
    return own.permute(0, 2, 1).reshape(n_head, chunk)

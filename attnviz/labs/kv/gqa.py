"""What if a multi-head layer had shared its keys and values? MHA -> GQA/MQA on a real layer.

GQA (Ainslie et al., 2023) converts a trained MHA checkpoint by mean-pooling
the key and value projection matrices of the heads in each group, then
uptraining briefly. This module does the first step only, on one real layer,
and measures how far the pooled layer is from the original before any
uptraining: per query head, the Jensen–Shannon divergence between the
original and the converted attention rows; for the layer, the relative change
of its output; and the KV cache bytes per token the sharing saves. It shows
why uptraining is needed (or, for heads that already look alike, why it
barely is).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch
from torch import Tensor, nn

from attnviz.core.attention import MultiHeadAttention, group_size, reduction_dtype
from attnviz.core.head_stats import JS_MAX as JS_MAX  # the bound its JSD columns read against
from attnviz.core.head_stats import js_divergence
from attnviz.i18n.message import msg
from attnviz.models.source import LayerInput


def pool_heads(weight: Tensor, n_kv_head: int, new_n_kv_head: int) -> Tensor:
    """Mean of the projection rows of each group of adjacent K/V heads.

    (n_kv_head * head_dim, ...) -> (new_n_kv_head * head_dim, ...): new head m
    is the mean of old heads m*g .. m*g + g - 1, g = n_kv_head / new_n_kv_head.
    Adjacent heads, so query head h still reads K/V head h // (n_head / new_n_kv_head).
    Works for a weight (rows, d_model) and a bias (rows,) alike.
    """
    g = group_size(n_kv_head, new_n_kv_head)
    per_head = weight.reshape(new_n_kv_head, g, weight.shape[0] // n_kv_head, *weight.shape[1:])  # (new, g, hd, ...)
    return per_head.mean(dim=1).reshape(-1, *weight.shape[1:])  # (new * hd, ...)


def _copy_linear(dst: nn.Linear, weight: Tensor, bias: Tensor | None) -> None:
    dst.weight.copy_(weight)
    if dst.bias is not None:
        dst.bias.copy_(bias)


@torch.no_grad()
def convert_to_gqa(mha: MultiHeadAttention, n_kv_head: int) -> MultiHeadAttention:
    """A copy of ``mha`` with ``n_kv_head`` K/V heads, each the mean of the K/V heads of its group.

    Q and O are copied unchanged. ``n_kv_head`` must divide ``mha.n_kv_head``
    (ValueError otherwise); ``n_kv_head == mha.n_kv_head`` is an exact copy,
    1 is MQA. The result is on ``mha``'s device and dtype, in eval mode.
    """
    if n_kv_head < 1 or mha.n_kv_head % n_kv_head != 0:
        raise ValueError(f"n_kv_head ({n_kv_head}) must divide the layer's n_kv_head ({mha.n_kv_head})")
    weight = mha.w_q.weight
    converted = MultiHeadAttention(
        mha.d_model,
        mha.n_head,
        n_kv_head,
        bias=mha.w_q.bias is not None,
        dropout=mha.dropout,
        head_dim=mha.head_dim,
    ).to(device=weight.device, dtype=weight.dtype)
    _copy_linear(converted.w_q, mha.w_q.weight, mha.w_q.bias)
    _copy_linear(converted.w_o, mha.w_o.weight, mha.w_o.bias)
    for dst, src in ((converted.w_k, mha.w_k), (converted.w_v, mha.w_v)):
        bias = None if src.bias is None else pool_heads(src.bias, mha.n_kv_head, n_kv_head)
        _copy_linear(dst, pool_heads(src.weight, mha.n_kv_head, n_kv_head), bias)
    return converted.eval()


def kv_bytes_per_token(mha: MultiHeadAttention) -> int:
    """Bytes one position adds to this layer's KV cache: K and V, n_kv_head * head_dim each, in its dtype."""
    return 2 * mha.n_kv_head * mha.head_dim * mha.w_k.weight.element_size()


def default_groups(n_kv_head: int) -> tuple[int, ...]:
    """Every group size that divides ``n_kv_head``: 1 (the layer as it is) up to n_kv_head (MQA)."""
    return tuple(g for g in range(1, n_kv_head + 1) if n_kv_head % g == 0)


@torch.no_grad()
def _run(mha: MultiHeadAttention, layer_input: LayerInput) -> tuple[Tensor, Tensor]:
    hidden = layer_input.hidden  # (1, T, d_model)
    out, weights = mha(
        hidden, hidden, hidden, mask=layer_input.mask, rotate=layer_input.rotate, scale=layer_input.scale
    )
    return out, weights  # (1, T, d_model), (1, n_head, T, T)


@torch.no_grad()
def gqa_whatif(layer_input: LayerInput, groups: Sequence[int] | None = None) -> pd.DataFrame:
    """Pool a real layer's K/V heads in groups of g and compare the converted layer with the original.

    One row per (g, query head), in this order, with columns: group (g),
    n_kv_head (the layer's K/V heads / g), head (query head), kv_head (the pooled
    K/V head it reads), js_nats (mean over query rows of the Jensen–Shannon
    divergence between original and converted weights, nats, in [0, ln 2]),
    js_max_nats (the worst row), output_rel_change (||out' - out|| / ||out|| over
    the whole layer output, the same on every row of a g), kv_bytes_per_token and
    kv_bytes_per_token_before (this layer, K and V), kv_saving (before / after).
    ``groups`` defaults to every divisor of the layer's n_kv_head; ValueError for one that does not divide it,
    and for a layer input of no tokens.
    """
    if layer_input.hidden.shape[1] == 0:  # no rows to compare: the divergences would be means over nothing
        raise ValueError(msg("page_extremes.whatif_no_tokens"))
    mha = layer_input.attention
    groups = default_groups(mha.n_kv_head) if groups is None else tuple(groups)
    for g in groups:
        if g < 1 or mha.n_kv_head % g:
            raise ValueError(f"group size {g} must divide the layer's n_kv_head ({mha.n_kv_head})")
    out, weights = _run(mha, layer_input)  # in the layer's dtype, on its device
    wide = reduction_dtype(out.device)  # float64 on the CPU, float32 on an accelerator
    before = kv_bytes_per_token(mha)
    out_norm = float(out.to(wide).norm())
    rows = []
    for g in groups:
        converted = convert_to_gqa(mha, mha.n_kv_head // g)
        out_g, weights_g = _run(converted, layer_input)
        js = js_divergence(weights[0], weights_g[0])  # (n_head, T)
        change = float((out_g.to(wide) - out.to(wide)).norm()) / out_norm if out_norm else 0.0
        after = kv_bytes_per_token(converted)
        n_rep = mha.n_head // converted.n_kv_head
        for head in range(mha.n_head):
            rows.append(
                {
                    "group": g,
                    "n_kv_head": converted.n_kv_head,
                    "head": head,
                    "kv_head": head // n_rep,
                    "js_nats": float(js[head].mean()),
                    "js_max_nats": float(js[head].max()),
                    "output_rel_change": change,
                    "kv_bytes_per_token_before": before,
                    "kv_bytes_per_token": after,
                    "kv_saving": before / after,
                }
            )
    return pd.DataFrame(rows)

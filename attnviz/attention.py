"""The project's own attention: scaled dot-product, multi-head (MHA, GQA, MQA) and a KV cache.

Every picture in attnviz is drawn from weights this module computed (or, for a
pretrained model, from weights this module reproduces to 1e-5), so the code is
written to be read: one small function per concept, a shape comment wherever a
tensor changes shape.

Shape vocabulary (the same everywhere in attnviz):
    q        (batch, n_head,    q_len, head_dim)
    k, v     (batch, n_kv_head, k_len, head_dim)
    weights  (batch, n_head,    q_len, k_len)

Mask convention, the same as ``torch.nn.functional.scaled_dot_product_attention``:
a bool mask is True where a query *may attend* to a key; a float mask is added
to the scores (0 to keep, ``-inf`` to drop). Either broadcasts to
``(batch, n_head, q_len, k_len)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# A function that rotates q and k by position (RoPE), given the absolute
# positions of the new tokens: (q, k, positions) -> (q, k).
PositionRotation = Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]


def split_heads(x: Tensor, n_head: int) -> Tensor:
    """(batch, seq, n_head * head_dim) -> (batch, n_head, seq, head_dim)."""
    batch, seq, width = x.shape
    return x.view(batch, seq, n_head, width // n_head).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(batch, n_head, seq, head_dim) -> (batch, seq, n_head * head_dim)."""
    batch, n_head, seq, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq, n_head * head_dim)


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """Share each K/V head with ``n_rep`` query heads (GQA/MQA).

    (batch, n_kv_head, k_len, head_dim) -> (batch, n_kv_head * n_rep, k_len, head_dim);
    query head ``h`` reads K/V head ``h // n_rep``, as in torch's ``enable_gqa``.
    """
    if n_rep == 1:
        return x
    batch, n_kv_head, k_len, head_dim = x.shape
    x = x[:, :, None, :, :].expand(batch, n_kv_head, n_rep, k_len, head_dim)
    return x.reshape(batch, n_kv_head * n_rep, k_len, head_dim)


def group_size(n_head: int, n_kv_head: int) -> int:
    """How many query heads share one K/V head; ValueError if they do not divide."""
    if n_kv_head < 1 or n_head < 1 or n_head % n_kv_head != 0:
        raise ValueError(f"n_head ({n_head}) must be a positive multiple of n_kv_head ({n_kv_head})")
    return n_head // n_kv_head


def mask_to_additive(mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """A bool "may attend" mask as an additive float mask (0 or -inf); floats pass through."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))


def fully_masked_rows(mask: Tensor | None) -> Tensor | None:
    """Which query rows may attend to no key at all: (..., q_len, k_len) -> (..., q_len).

    Such rows get zero weights and zero output from :func:`scaled_dot_product_attention`
    instead of the NaN that a plain softmax over ``-inf`` gives.
    """
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return ~mask.any(dim=-1)
    return torch.isneginf(mask).all(dim=-1)


def masked_softmax(scores: Tensor) -> Tensor:
    """Softmax over keys where a row of all ``-inf`` gives zeros, not NaN.

    (..., q_len, k_len) -> (..., q_len, k_len)
    """
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (..., q_len, 1)
    weights = torch.softmax(scores.masked_fill(dead, 0.0), dim=-1)
    return weights.masked_fill(dead, 0.0)


def attention_scores(q: Tensor, k: Tensor, scale: float) -> Tensor:
    """q·kᵀ times the scale: (B, n_head, q_len, hd) x (B, n_head, k_len, hd) -> (B, n_head, q_len, k_len)."""
    return (q @ k.transpose(-2, -1)) * scale


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """softmax(q·kᵀ · scale + mask) · v, returning the output and the weights.

    q: (batch, n_head, q_len, head_dim); k, v: (batch, n_kv_head, k_len, head_dim)
    with n_head a multiple of n_kv_head (GQA; MQA when n_kv_head == 1).
    mask: bool (True = may attend) or additive float, broadcastable to
    (batch, n_head, q_len, k_len). scale defaults to 1/sqrt(head_dim): it keeps the
    variance of q·k at 1, so the softmax does not saturate.

    Returns output (batch, n_head, q_len, head_dim) and weights
    (batch, n_head, q_len, k_len). A row whose keys are all masked has zero
    weights and zero output; :func:`fully_masked_rows` names those rows.
    """
    n_rep = group_size(q.shape[1], k.shape[1])
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    k = repeat_kv(k, n_rep)  # (B, n_head, k_len, head_dim)
    v = repeat_kv(v, n_rep)  # (B, n_head, k_len, head_dim)
    scores = attention_scores(q, k, scale)  # (B, n_head, q_len, k_len)
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask
    weights = masked_softmax(scores)  # (B, n_head, q_len, k_len)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p, training=True)
    output = weights @ v  # (B, n_head, q_len, head_dim)
    return output, weights


def fused_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> Tensor:
    """The fast path: torch's fused SDPA, same shapes and conventions, no weights.

    Fully masked rows are zeroed so both paths agree exactly on them too.
    """
    n_rep = group_size(q.shape[1], k.shape[1])
    output = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale, enable_gqa=n_rep > 1
    )  # (B, n_head, q_len, head_dim)
    dead = fully_masked_rows(mask)
    if dead is not None and bool(dead.any()):
        dead = dead.expand(output.shape[:-1])  # (B, n_head, q_len)
        output = output.masked_fill(dead[..., None], 0.0)
    return output


class KVCache:
    """Keys and values of one attention layer, grown one decoding step at a time.

    Holds k and v as (batch, n_kv_head, seq, head_dim). GQA/MQA models cache only
    the n_kv_head shared heads, which is exactly where their memory saving comes from.
    """

    def __init__(self) -> None:
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def update(self, k_new: Tensor, v_new: Tensor) -> tuple[Tensor, Tensor]:
        """Append (batch, n_kv_head, new, head_dim) and return all keys and values so far."""
        if self.k is None:
            self.k, self.v = k_new, v_new
        else:
            self.k = torch.cat([self.k, k_new], dim=2)  # (B, n_kv_head, seq + new, hd)
            self.v = torch.cat([self.v, v_new], dim=2)
        return self.k, self.v

    @property
    def nbytes(self) -> int:
        """Exact bytes held by the cached key and value tensors."""
        if self.k is None:
            return 0
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()


def kv_cache_bytes(caches: list[KVCache]) -> int:
    """Exact bytes held by the caches of all layers."""
    return sum(cache.nbytes for cache in caches)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with W_Q, W_K, W_V and W_O; MHA, GQA and MQA by configuration.

    ``n_kv_head`` defaults to ``n_head`` (MHA); ``1 < n_kv_head < n_head`` is GQA and
    ``n_kv_head == 1`` is MQA. ``head_dim`` defaults to d_model // n_head.
    """

    def __init__(
        self,
        d_model: int,
        n_head: int,
        n_kv_head: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        head_dim: int | None = None,
    ) -> None:
        super().__init__()
        n_kv_head = n_head if n_kv_head is None else n_kv_head
        if d_model < 1 or n_head < 1:
            raise ValueError(f"d_model ({d_model}) and n_head ({n_head}) must be positive")
        if head_dim is None:
            if d_model % n_head != 0:
                raise ValueError(
                    f"d_model ({d_model}) must be divisible by n_head ({n_head}); "
                    f"{d_model} % {n_head} = {d_model % n_head}"
                )
            head_dim = d_model // n_head
        group_size(n_head, n_kv_head)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout ({dropout}) must be in [0, 1)")
        self.d_model, self.n_head, self.n_kv_head = d_model, n_head, n_kv_head
        self.head_dim, self.dropout = head_dim, dropout
        self.w_q = nn.Linear(d_model, n_head * head_dim, bias=bias)
        self.w_k = nn.Linear(d_model, n_kv_head * head_dim, bias=bias)
        self.w_v = nn.Linear(d_model, n_kv_head * head_dim, bias=bias)
        self.w_o = nn.Linear(n_head * head_dim, d_model, bias=bias)

    def project_qkv(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        rotate: PositionRotation | None = None,
        positions: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """(B, T, d_model) inputs -> q (B, n_head, T, hd), k and v (B, n_kv_head, S, hd)."""
        q = split_heads(self.w_q(query), self.n_head)  # (B, n_head, T, head_dim)
        k = split_heads(self.w_k(key), self.n_kv_head)  # (B, n_kv_head, S, head_dim)
        v = split_heads(self.w_v(value), self.n_kv_head)  # (B, n_kv_head, S, head_dim)
        if rotate is not None:
            q, k = rotate(q, k, positions)
        return q, k, v

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        need_weights: bool = True,
        kv_cache: KVCache | None = None,
        rotate: PositionRotation | None = None,
        scale: float | None = None,
        on_qkv: Callable[[Tensor, Tensor, Tensor], None] | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """query (B, T, d_model), key/value (B, S, d_model) -> output (B, T, d_model), weights.

        weights is (B, n_head, T, S_total) when ``need_weights`` (the inspectable
        path), else None (torch's fused path). With ``kv_cache``, the new keys and
        values are appended and attention runs over everything cached; the mask
        must then cover all cached keys (see ``masks.causal_mask(offset=...)``).
        ``rotate`` applies rotary position embeddings to q and k at their
        absolute positions (the cache length is the offset). ``on_qkv`` is called
        with the q, k and v that enter the softmax, for pages that show them.
        """
        offset = len(kv_cache) if kv_cache is not None else 0
        positions = torch.arange(offset, offset + query.shape[1], device=query.device)
        q, k, v = self.project_qkv(query, key, value, rotate, positions)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)  # (B, n_kv_head, S_total, head_dim)
        if on_qkv is not None:
            on_qkv(q, k, v)
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            out, weights = scaled_dot_product_attention(q, k, v, mask, scale, dropout_p)
        else:
            out, weights = fused_attention(q, k, v, mask, scale, dropout_p), None
        return self.w_o(merge_heads(out)), weights  # (B, T, d_model)

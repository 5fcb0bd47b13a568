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
to the scores (0 to keep, ``-inf`` or ``torch.finfo(dtype).min`` to drop, the
latter as Hugging Face builds them). Either has 1 to 4 dims and broadcasts to
``(batch, n_head, q_len, k_len)``; a 1-D mask (k_len,) is a key mask applied to
every query. A float mask of another dtype than q is cast to q's (torch's fused
kernel would refuse it); any other dtype (an integer 0/1 mask) is a TypeError.
Both the inspectable and the fused path apply this one rule,
:func:`attnviz.core.masks.check_mask`, so they accept and refuse the same masks.

Precision: q, k and v stay in the model's dtype, and so do the scores and the
weights, but a softmax over bfloat16 or float16 scores accumulates in float32
(:func:`softmax_dtype`), as transformers' eager attention does, so our layers
reproduce a low-precision model's own to its dtype's rounding (tests/tolerances.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnviz.core.masks import causal_mask, check_mask, masked_cells
from attnviz.i18n.message import msg

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
    """Share each K/V head with ``n_rep`` query heads (GQA/MQA), as a copy.

    (batch, n_kv_head, k_len, head_dim) -> (batch, n_kv_head * n_rep, k_len, head_dim);
    query head ``h`` reads K/V head ``h // n_rep``, as in torch's ``enable_gqa``.
    The attention functions here do not call it (they group the queries instead,
    which copies nothing); it stays as the definition that GQA is tested against.
    """
    if n_rep == 1:
        return x
    batch, n_kv_head, k_len, head_dim = x.shape
    x = x[:, :, None, :, :].expand(batch, n_kv_head, n_rep, k_len, head_dim)
    return x.reshape(batch, n_kv_head * n_rep, k_len, head_dim)


def group_size(n_head: int, n_kv_head: int) -> int:
    """How many query heads share one K/V head; ValueError if they do not divide."""
    if n_kv_head < 1 or n_head < 1 or n_head % n_kv_head != 0:
        raise ValueError(msg("bounds.kv_group", n_head=n_head, n_kv_head=n_kv_head))
    return n_head // n_kv_head


def mask_to_additive(mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """A bool "may attend" mask as an additive float mask (0 or -inf); floats pass through."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))


def with_causal(mask: Tensor | None, q_len: int, k_len: int, device: torch.device | str | None = None) -> Tensor:
    """``mask`` AND "no peeking at the future": broadcastable to (..., q_len, k_len).

    The causal part is :func:`attnviz.core.masks.causal_mask` ``(q_len, k_len)``, aligned
    bottom-right: the queries are the last ``q_len`` of ``k_len`` positions, as when
    decoding with a KV cache. (torch's ``is_causal`` aligns top-left, which for
    q_len < k_len would hide the cached tokens from the new ones.) A bool mask is
    combined with ``&``; a float mask gets ``-inf`` on the future keys.
    ValueError when q_len > k_len: some queries would have no position among the keys.
    """
    if q_len > k_len:
        raise ValueError(
            f"is_causal needs q_len ({q_len}) <= k_len ({k_len}): the queries are the last q_len of the k_len positions"
        )
    causal = causal_mask(q_len, k_len, device=device)  # (q_len, k_len)
    if mask is None:
        return causal
    if mask.dtype == torch.bool:
        return mask & causal  # (..., q_len, k_len)
    return torch.where(causal, mask, float("-inf"))  # (..., q_len, k_len)


def fully_masked_rows(mask: Tensor | None, dtype: torch.dtype | None = None) -> Tensor | None:
    """Which query rows may attend to no key at all: (..., q_len, k_len) -> (..., q_len).

    Such rows get zero weights and zero output from :func:`scaled_dot_product_attention`
    instead of the NaN that a plain softmax over ``-inf`` gives (or the uniform
    weights it gives over ``finfo.min``). A float mask hides a key where it is
    ``-inf`` or at most ``torch.finfo(...).min`` of its dtype or of ``dtype``, the
    scores' (see :func:`attnviz.core.masks.masked_cells`).
    """
    if mask is None:
        return None
    return masked_cells(mask, dtype).all(dim=-1)


def _tracked(x: Tensor) -> bool:
    """Whether autograd records ops on ``x``; softmax's backward then needs its output intact."""
    return torch.is_grad_enabled() and x.requires_grad


def softmax_dtype(dtype: torch.dtype) -> torch.dtype:
    """What a softmax over scores of ``dtype`` accumulates in: float32 for bfloat16 and float16, else ``dtype``."""
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def reduction_dtype(device: torch.device | str) -> torch.dtype:
    """What a comparison that must not lose small differences (a divergence, the norm of a difference) reduces in
    on ``device``: float64 on the CPU, float32 on an accelerator (MPS has no float64; a GPU runs it at a fraction
    of float32's speed)."""
    return torch.float64 if torch.device(device).type == "cpu" else torch.float32


def _softmax(scores: Tensor, overwrite: bool) -> Tensor:
    """Softmax over the last dim, written over ``scores`` when ``overwrite`` and it is safe.

    Writing in place saves one scores-sized allocation, the largest tensor here.
    Only on the CPU, whose kernel reads each row before writing it, and never
    when autograd records the op (``out=`` is not differentiable).
    Scores in bfloat16 or float16 are exponentiated and summed in float32 and the
    weights rounded back to the scores' dtype, as transformers' eager attention
    does (``softmax(scores, dtype=float32).to(q.dtype)``); float32 and float64
    scores take the plain softmax, bit for bit what they always did.
    """
    wide = softmax_dtype(scores.dtype)
    if wide != scores.dtype:
        weights = torch.softmax(scores, dim=-1, dtype=wide)  # (..., k_len) in float32
        if overwrite and not _tracked(scores):
            return scores.copy_(weights)
        return weights.to(scores.dtype)
    if overwrite and scores.device.type == "cpu" and scores.is_contiguous() and not _tracked(scores):
        return torch.softmax(scores, dim=-1, out=scores)
    return scores.softmax(dim=-1)


def masked_softmax(scores: Tensor, dead_rows: Tensor | None = None, *, inplace: bool = False) -> Tensor:
    """Softmax over keys where a row of all ``-inf`` (or ``finfo.min``) gives zeros, not NaN.

    (..., q_len, k_len) -> (..., q_len, k_len)

    ``dead_rows`` (broadcastable to (..., q_len)) names the rows to zero when the
    caller knows them already, from a mask far smaller than the scores; without it
    they are found by reading all the scores. ``inplace=True`` lets the function
    overwrite ``scores`` (the attention path owns them), saving a copy of the
    largest tensor; otherwise ``scores`` is left untouched.
    """
    if dead_rows is None:
        dead_rows = (scores <= torch.finfo(scores.dtype).min).all(dim=-1)  # (..., q_len); -inf included
    if dead_rows.device.type == "cpu" and not bool(dead_rows.any()):  # on a GPU, reading it back waits for the GPU
        return _softmax(scores, inplace)
    dead = dead_rows[..., None]  # (..., q_len, 1)
    # A uniform row instead of 0/0, so no NaN reaches the weights, nor the gradients.
    scores = scores.masked_fill_(dead, 0.0) if inplace else scores.masked_fill(dead, 0.0)
    weights = _softmax(scores, inplace)
    if _tracked(weights) or not inplace:
        return weights.masked_fill(dead, 0.0)
    return weights.masked_fill_(dead, 0.0)


def attention_scores(q: Tensor, k: Tensor, scale: float) -> Tensor:
    """q·kᵀ times the scale: (B, n_head, q_len, hd) x (B, n_kv_head, k_len, hd) -> (B, n_head, q_len, k_len).

    With GQA (n_kv_head < n_head) the queries of each group are stacked, so one
    matmul per K/V head broadcasts without copying K. The scale multiplies the
    scores, in place, after the matmul, in the order PyTorch's and transformers'
    eager attention use: scaling q instead would save a pass but round
    differently, and our layers reproduce pretrained ones to 0.0.
    """
    batch, n_head, q_len, head_dim = q.shape
    n_kv_head, k_len = k.shape[1], k.shape[2]
    n_rep = group_size(n_head, n_kv_head)
    q = q.reshape(batch, n_kv_head, n_rep * q_len, head_dim)  # (B, n_kv_head, n_rep * q_len, hd)
    scores = (q @ k.transpose(-2, -1)).mul_(scale)  # (B, n_kv_head, n_rep * q_len, k_len)
    return scores.view(scores.shape[0], n_head, q_len, k_len)  # (B, n_head, q_len, k_len)


def apply_mask(scores: Tensor, mask: Tensor | None) -> Tensor:
    """Hide from each query what it may not see, in place: scores (B, n_head, q_len, k_len).

    A bool mask sets hidden cells to -inf, so exp gives them no weight at all; a
    float mask is added. ``mask`` broadcasts to the scores; None changes nothing.
    """
    if mask is None:
        return scores
    if mask.dtype == torch.bool:
        return scores.masked_fill_(~mask, float("-inf"))
    return scores.add_(mask)


def attention_weights(scores: Tensor, dead: Tensor | None = None) -> Tensor:
    """softmax over the keys, written over ``scores``: (B, n_head, q_len, k_len) -> weights.

    ``dead`` (broadcastable to (..., q_len)) names the rows that see no key, which
    get zero weights instead of NaN; None means there are none.
    """
    if dead is None:
        return _softmax(scores, overwrite=True)
    return masked_softmax(scores, dead, inplace=True)


def weighted_values(weights: Tensor, v: Tensor) -> Tensor:
    """weights·v: (B, n_head, q_len, k_len) x (B, n_kv_head, k_len, hd) -> (B, n_head, q_len, hd).

    Query head ``h`` reads value head ``h // n_rep``; the weights are grouped the
    same way as in :func:`attention_scores`, so V is not copied either.
    """
    batch, n_head, q_len, k_len = weights.shape
    n_kv_head, head_dim = v.shape[1], v.shape[-1]
    n_rep = group_size(n_head, n_kv_head)
    grouped = weights.reshape(batch, n_kv_head, n_rep * q_len, k_len)  # (B, n_kv_head, n_rep * q_len, k_len)
    output = grouped @ v  # (B, n_kv_head, n_rep * q_len, hd)
    return output.view(output.shape[0], n_head, q_len, head_dim)  # (B, n_head, q_len, hd)


def check_sinks(sinks: Tensor | None, n_head: int) -> None:
    """ValueError unless ``sinks`` is None or one logit per head: (n_head,)."""
    if sinks is not None and tuple(sinks.shape) != (n_head,):
        raise ValueError(f"sinks must hold one logit per head ({n_head}), not shape {tuple(sinks.shape)}")


def with_sink_column(scores: Tensor, sinks: Tensor) -> Tensor:
    """Scores (B, n_head, q_len, k_len) with each head's sink logit as one more key: (B, n_head, q_len, k_len + 1)."""
    column = sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    return torch.cat([scores, column], dim=-1)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    *,
    is_causal: bool = False,
    sinks: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """softmax(q·kᵀ · scale + mask) · v, returning the output and the weights.

    q: (batch, n_head, q_len, head_dim); k, v: (batch, n_kv_head, k_len, head_dim)
    with n_head a multiple of n_kv_head (GQA; MQA when n_kv_head == 1).
    mask: bool (True = may attend) or additive float, 1 to 4 dims broadcastable
    to (batch, n_head, q_len, k_len); a 1-D (k_len,) mask hides the same keys from
    every query. TypeError for any other dtype, ValueError for a shape that does
    not broadcast (:func:`attnviz.core.masks.check_mask`).
    scale defaults to 1/sqrt(head_dim): it keeps the variance of q·k at 1, so
    the softmax does not saturate.
    is_causal: hide future keys, as torch's ``is_causal`` when q_len == k_len;
    when q_len < k_len (a KV cache) the queries are the *last* q_len positions
    (see :func:`with_causal`). Together with ``mask`` both apply (AND).

    Returns output (batch, n_head, q_len, head_dim) and weights
    (batch, n_head, q_len, k_len). A row whose keys are all masked has zero
    weights and zero output (``-inf`` and ``finfo.min`` alike); :func:`fully_masked_rows`
    names those rows.

    sinks: (n_head,) learned sink logits (gpt-oss' ``s_aux``): one more term in
    every row's softmax denominator, attached to no value. The weights returned
    are those on the keys, so each row sums to 1 minus the sink's share; a row
    whose keys are all masked gives everything to the sink (zero weights, zero
    output, as without sinks).
    """
    group_size(q.shape[1], k.shape[1])
    mask = check_mask(mask, (q.shape[0], q.shape[1], q.shape[-2], k.shape[-2]), like=q)
    check_sinks(sinks, q.shape[1])
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    # Dead rows are read off the mask, which is far smaller than the scores. A
    # causal mask alone leaves none: every query sees at least its own position.
    only_causal = is_causal and mask is None
    if is_causal:
        mask = with_causal(mask, q.shape[-2], k.shape[-2], q.device)  # (..., q_len, k_len)
    dead = None if only_causal else fully_masked_rows(mask, q.dtype)  # (..., q_len)
    scores = attention_scores(q, k, scale)  # (B, n_head, q_len, k_len)
    scores = apply_mask(scores, mask)  # -inf where a query may not look
    if sinks is not None:
        weights = _softmax(with_sink_column(scores, sinks), overwrite=True)[..., :-1]  # (B, n_head, q_len, k_len)
    else:
        weights = attention_weights(scores, dead)  # (B, n_head, q_len, k_len)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p, training=True, inplace=not _tracked(weights))
    output = weighted_values(weights, v)  # (B, n_head, q_len, head_dim)
    return output, weights


def fused_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    *,
    is_causal: bool = False,
    sinks: Tensor | None = None,
) -> Tensor:
    """The fast path: torch's fused SDPA, same shapes and conventions, no weights.

    ``is_causal`` and ``mask`` mean what they mean in :func:`scaled_dot_product_attention`,
    and the same masks are accepted and rejected.
    With no mask and q_len == k_len it goes to torch as ``is_causal=True``, which
    lets the fused kernel skip the future blocks instead of reading a mask (about
    2x faster at 2,048+ tokens); otherwise the causal mask is built and combined.
    Fully masked rows are zeroed so both paths agree exactly on them too.

    ``sinks`` (n_head,) joins the kernel as one more key whose k and v are zero
    and whose score is the sink's logit, given through the additive mask.
    """
    n_rep = group_size(q.shape[1], k.shape[1])
    q_len, k_len = q.shape[-2], k.shape[-2]
    mask = check_mask(mask, (q.shape[0], q.shape[1], q_len, k_len), like=q)
    check_sinks(sinks, q.shape[1])
    if sinks is not None:
        return _fused_with_sinks(q, k, v, mask, scale, dropout_p, is_causal, sinks)
    if is_causal and mask is None and q_len == k_len:
        return F.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale, enable_gqa=n_rep > 1
        )  # (B, n_head, q_len, head_dim)
    if is_causal:
        mask = with_causal(mask, q_len, k_len, q.device)
    output = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale, enable_gqa=n_rep > 1
    )  # (B, n_head, q_len, head_dim)
    dead = fully_masked_rows(mask, q.dtype)  # (..., q_len)
    if dead is not None and (dead.device.type != "cpu" or bool(dead.any())):  # on a GPU, zero without reading back
        dead = dead.expand(output.shape[:-1])  # (B, n_head, q_len)
        output = output.masked_fill(dead[..., None], 0.0)
    return output


SINK_CHUNK_ELEMENTS = 2**24  # bias cells built at once by the fused path with sinks (64 MB in float32)


def _fused_with_sinks(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale, dropout_p: float, is_causal: bool, sinks: Tensor
) -> Tensor:
    """:func:`fused_attention` with learned sinks: a zero key and value per K/V head whose bias is the sink logit.

    The bias differs per head, so it is built (B, n_head, rows, k_len + 1) for a
    chunk of query rows at a time, never for the whole square.
    """
    batch, n_head, q_len, _ = q.shape
    k_len = k.shape[-2]
    if is_causal:
        mask = with_causal(mask, q_len, k_len, q.device)  # (..., q_len, k_len)
    k = torch.cat([k, k.new_zeros(*k.shape[:-2], 1, k.shape[-1])], dim=-2)  # (B, n_kv_head, k_len + 1, hd)
    v = torch.cat([v, v.new_zeros(*v.shape[:-2], 1, v.shape[-1])], dim=-2)
    gqa = group_size(n_head, k.shape[1]) > 1
    chunk = max(1, SINK_CHUNK_ELEMENTS // max(1, batch * n_head * (k_len + 1)))
    outputs = []
    for r0 in range(0, q_len, chunk):
        r1 = min(q_len, r0 + chunk)
        bias = torch.zeros(batch, n_head, r1 - r0, k_len, dtype=q.dtype, device=q.device)
        if mask is not None:
            rows = mask[..., r0:r1, :] if mask.dim() >= 2 and mask.shape[-2] == q_len else mask
            bias = apply_mask(bias, rows)
        bias = with_sink_column(bias, sinks)  # (B, n_head, rows, k_len + 1)
        outputs.append(
            F.scaled_dot_product_attention(
                q[..., r0:r1, :], k, v, attn_mask=bias, dropout_p=dropout_p, scale=scale, enable_gqa=gqa
            )
        )
    return torch.cat(outputs, dim=-2)  # (B, n_head, q_len, head_dim); a row with every key masked: zero output


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
        *,
        is_causal: bool = False,
        attend: Callable[[Tensor, Tensor, Tensor], Tensor] | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """query (B, T, d_model), key/value (B, S, d_model) -> output (B, T, d_model), weights.

        weights is (B, n_head, T, S_total) when ``need_weights`` (the inspectable
        path), else None (torch's fused path). With ``kv_cache``, the new keys and
        values are appended and attention runs over everything cached; the mask
        must then cover all cached keys (see ``masks.causal_mask(offset=...)``).
        ``rotate`` applies rotary position embeddings to q and k at their
        absolute positions (the cache length is the offset). ``on_qkv`` is called
        with the q, k and v that enter the softmax, for pages that show them.
        ``is_causal`` hides future keys without a mask tensor (and lets the fused
        path use torch's causal kernel); with a KV cache the new tokens see every
        cached one, as :func:`with_causal` describes. It combines with ``mask`` (AND).
        ``attend`` replaces the attention step itself: it gets q, k and v after
        rotation and cache and returns the output (B, n_head, T, head_dim), and the
        weights come back None (``attnviz.core.capture`` computes them in bounded memory).
        """
        offset = len(kv_cache) if kv_cache is not None else 0
        positions = torch.arange(offset, offset + query.shape[1], device=query.device)
        q, k, v = self.project_qkv(query, key, value, rotate, positions)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)  # (B, n_kv_head, S_total, head_dim)
        if on_qkv is not None:
            on_qkv(q, k, v)
        dropout_p = self.dropout if self.training else 0.0
        if attend is not None:
            out, weights = attend(q, k, v), None
        elif need_weights:
            out, weights = scaled_dot_product_attention(q, k, v, mask, scale, dropout_p, is_causal=is_causal)
        else:
            out, weights = fused_attention(q, k, v, mask, scale, dropout_p, is_causal=is_causal), None
        return self.w_o(merge_heads(out)), weights  # (B, T, d_model)


def naive_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The textbook four lines, kept as the yardstick the inspectable path is measured against.

    q (B, n_head, T, hd), k and v (B, n_kv_head, S, hd) -> output (B, n_head, T, hd),
    weights (B, n_head, T, S). K and V are repeated per query head with
    ``repeat_interleave`` (one copy each, the cheapest way for this form), and the
    whole scores matrix is held: this is what "O(n²) memory" means. A fully
    masked row gives NaN here.
    """
    n_rep = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(n_rep, dim=1)  # (B, n_head, T, hd)
    v = v.repeat_interleave(n_rep, dim=1)  # (B, n_head, T, hd)
    scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(q.shape[-1]))  # (B, n_head, T, T)
    if mask is not None:
        scores.masked_fill_(~mask, float("-inf"))
    weights = scores.softmax(-1)  # (B, n_head, T, T)
    return weights @ v, weights  # (B, n_head, T, hd)

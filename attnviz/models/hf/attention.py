"""attnviz's attention inside a Hugging Face model's real layers, through transformers' ``AttentionInterface``.

A model loaded with ``attn_implementation="attnviz"`` calls :func:`attention_forward`
from every attention layer with that layer's q, k (after RoPE) and v and the
mask the model built. What the function does is its pass's ``attn`` hook point
(:mod:`attnviz.models.hf.points`: the pass is a ``ContextVar``, so sessions sharing one model never see each
other's):

- no mode: the fast path, :func:`attnviz.core.attention.fused_attention` (torch's
  fused SDPA, with ``is_causal`` where the mask is plain causal);
- a :class:`~attnviz.core.capture.CaptureSession`: the chunked
  capture, which keeps statistics, pooled maps, q and k in bounded memory and
  computes the output from the same weights;
- a :class:`MaskOverride`: every layer attends under a mask the user gave
  instead of its own (the Mask lab's empirical tests);
- a :class:`ReferenceRun`: the model's own eager attention (its modeling file's
  ``eager_attention_forward``), returning full weights, and recording the mask
  each layer applied. Parity and the exactness tests compare against it.

In a pass, each call also serves the points ``attn.qkv`` (q, k and v read) and, where the output projections were
not found, ``attn.z`` (the heads' output rewritten before the projection reads it).

Masks are built by transformers' ``sdpa_mask`` (bool, True = may attend, or
None when plain causal or full), registered for the same name.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor

from attnviz.core.attention import fused_attention
from attnviz.core.capture import CaptureSession
from attnviz.core.masks import KeyRanges
from attnviz.errors import ModelUnavailableError
from attnviz.models.hf import points

IMPLEMENTATION = "attnviz"
# keyword arguments of the attention interface that change the math and that we cannot honour
UNSUPPORTED = ("sinks", "position_bias", "attention_bias", "indices")  # indices: DeepSeek's sparse top-k keys
SINKS = "s_aux"  # learned attention sinks, one logit per head (gpt-oss and its kind): honoured


class UnsupportedAttentionError(ModelUnavailableError):
    """A layer handed attnviz's attention something it cannot honour: the model needs the eager route."""


@dataclass
class ReferenceRun:
    """What a reference (eager) pass saw: for each layer, the mask of each sequence."""

    keys: list[list[KeyRanges]] = field(default_factory=list)


@dataclass(frozen=True, eq=False)
class MaskOverride:
    """A mask every layer applies instead of its own: bool (True = may attend) or additive float, (q_len, k_len)."""

    mask: Tensor


_registered = False


def register() -> None:
    """Make ``attn_implementation="attnviz"`` known to transformers (idempotent)."""
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(IMPLEMENTATION, attention_forward)
    AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)
    _registered = True


@contextmanager
def capturing(session: CaptureSession) -> Iterator[CaptureSession]:
    """Within this block, this context's forward passes are captured into ``session`` (a probe's bare pass; a
    source's passes hand the session to :func:`attnviz.models.hf.points.run` as their ``attn`` hook)."""
    with points.attending(session):
        yield session


@contextmanager
def reference() -> Iterator[ReferenceRun]:
    """Within this block, this context's forward passes run the model's own eager attention."""
    run = ReferenceRun()
    with points.attending(run):
        yield run


def _keep(mask: Tensor) -> Tensor:
    """A transformers mask as bool "may attend": bool passes through; additive floats keep their 0 cells."""
    if mask.dtype == torch.bool:
        return mask
    return mask > torch.finfo(mask.dtype).min / 2


def layer_keys(
    mask: Tensor | None, batch: int, q_len: int, k_len: int, causal: bool, window: int | None = None
) -> list[KeyRanges]:
    """The mask a layer was given, one :class:`KeyRanges` per sequence.

    ``None`` means what torch's SDPA makes of it: causal when the layer is causal
    and reads more than one query, else every key; within ``window`` keys when a
    layer passes its sliding window as an argument instead of in the mask
    (Granite-SWA does, as flash attention takes it).
    """
    if mask is None:
        if causal and window is not None and window < k_len:
            return [KeyRanges.causal(q_len, k_len, window=window)] * batch
        keys = KeyRanges.causal(q_len, k_len) if causal and q_len > 1 else KeyRanges.full(q_len, k_len)
        return [keys] * batch
    run = points.current()
    seen = None if run is None else run.seen_masks
    if seen is not None and id(mask) in seen and seen[id(mask)][0] is mask:
        return seen[id(mask)][1]
    keep = _keep(mask)  # (B or 1, 1, q_len, k_len)
    ranges = []
    for b in range(batch):
        row = keep[b if keep.shape[0] > 1 else 0, 0]  # (q_len, k_len)
        try:
            ranges.append(KeyRanges.from_mask(row))
        except ValueError as err:
            raise ModelUnavailableError(f"attnviz cannot represent this model's attention mask: {err}") from err
    if seen is not None:
        seen[id(mask)] = (mask, ranges)  # holding the tensor keeps its id from being reused
    return ranges


def _eager(module) -> object:
    """The eager attention of the module's own modeling file (what ``attn_implementation="eager"`` runs)."""
    eager = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if eager is None:
        raise ModelUnavailableError(f"{type(module).__name__} has no eager_attention_forward to compare with")
    return eager


def _additive(keys: list[KeyRanges], dtype: torch.dtype, device) -> Tensor:
    """The masks as eager attention takes them: 0 where kept, the dtype's minimum elsewhere: (B, 1, q, k)."""
    keep = torch.stack([k.dense() for k in keys])[:, None].to(device)
    return torch.where(keep, torch.zeros((), dtype=dtype, device=device), torch.finfo(dtype).min)


def attention_forward(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    softcap: float | None = None,
    **kwargs,
) -> tuple[Tensor, Tensor | None]:
    """The attention of one layer: query (B, n_head, T, hd), key/value (B, n_kv_head, S, hd).

    Returns (output (B, T, n_head, hd), weights or None), as every transformers
    attention function does.
    """
    present = [name for name in UNSUPPORTED if kwargs.get(name) is not None]
    if present:
        raise UnsupportedAttentionError(
            f"attnviz's attention does not support {', '.join(present)} (in {type(module).__name__})"
        )
    if points.current() is None:
        return _attend(module, query, key, value, attention_mask, dropout, scaling, softcap, **kwargs)
    points.at_attention(module, query, key, value, None)
    output, weights = _attend(module, query, key, value, attention_mask, dropout, scaling, softcap, **kwargs)
    return points.at_attention(module, query, key, value, output), weights  # (B, T, n_head, hd)


def _attend(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float,
    scaling: float | None,
    softcap: float | None,
    **kwargs,
) -> tuple[Tensor, Tensor | None]:
    """:func:`attention_forward` in this context's mode."""
    sinks = kwargs.get(SINKS)  # (n_head,) or None
    batch, _, q_len, _ = query.shape
    k_len = key.shape[2]
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    causal = kwargs.get("is_causal")
    causal = bool(getattr(module, "is_causal", True) if causal is None else causal)  # as transformers' sdpa reads it
    window = kwargs.get("sliding_window") if attention_mask is None else None
    window = window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None
    run = points.current()
    mode = None if run is None else run.hooks.get("attn")
    if isinstance(mode, CaptureSession) and not mode.seen(module, query):
        keys = layer_keys(attention_mask, batch, q_len, k_len, causal, window)
        output = mode.attend(query, key, value, keys, scale, softcap, sinks, module=module)  # (B, n_head, T, hd)
        return output.transpose(1, 2).contiguous(), None
    if isinstance(mode, CaptureSession):  # a layer's second call on the same q and k (DiffLlama): same weights
        keys = layer_keys(attention_mask, batch, q_len, k_len, causal, window)
        mask = torch.stack([k.dense() for k in keys])[:, None].to(query.device)  # (B, 1, q, k)
        if softcap is not None:
            return _eager(module)(
                module,
                query,
                key,
                value,
                _additive(keys, query.dtype, query.device),
                dropout=dropout,
                scaling=scale,
                softcap=softcap,
                **kwargs,
            )
        output = fused_attention(query, key, value, mask, scale, dropout, sinks=sinks)
        return output.transpose(1, 2).contiguous(), None
    if isinstance(mode, MaskOverride):
        mask = mode.mask.to(query.device)
        if mask.is_floating_point():
            mask = mask.to(query.dtype)  # (q_len, k_len), added to the scores in the model's dtype
        if softcap is not None:  # the cap acts before the mask: eager attention, which applies it there
            additive = (
                mask
                if mask.is_floating_point()
                else torch.zeros_like(mask, dtype=query.dtype).masked_fill(~mask, torch.finfo(query.dtype).min)
            )
            return _eager(module)(
                module,
                query,
                key,
                value,
                additive[None, None],
                dropout=dropout,
                scaling=scale,
                softcap=softcap,
                **kwargs,
            )
        output = fused_attention(query, key, value, mask, scale, dropout, sinks=sinks)  # (B, n_head, T, hd)
        return output.transpose(1, 2).contiguous(), None
    if isinstance(mode, ReferenceRun) or softcap is not None:
        keys = layer_keys(attention_mask, batch, q_len, k_len, causal)
        if isinstance(mode, ReferenceRun):
            mode.keys.append(keys)
        eager_mask = _additive(keys, query.dtype, query.device)
        extra = {"softcap": softcap} if softcap is not None else {}
        return _eager(module)(module, query, key, value, eager_mask, dropout=dropout, scaling=scale, **extra, **kwargs)
    plain_causal = attention_mask is None and causal and q_len > 1 and window is None
    mask = _keep(attention_mask) if attention_mask is not None else None
    if window is not None and attention_mask is None and causal:
        mask = KeyRanges.causal(q_len, k_len, window=window).dense().to(query.device)  # (q_len, k_len)
    output = fused_attention(
        query, key, value, mask, scale, dropout, is_causal=plain_causal, sinks=sinks
    )  # (B, n_head, T, hd)
    return output.transpose(1, 2).contiguous(), None

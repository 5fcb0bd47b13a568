"""A Hugging Face decoder's KV cache and greedy decoding: what the KV cache page measures and times.

:func:`prefill_kv` runs a prefill with ``use_cache=True`` and hands back what a
cache holds: transformers' own ``DynamicCache``, or attnviz's
:class:`~attnviz.core.attention.KVCache` in copies of the decoder's layers
(:func:`attnviz.models.hf.parity.layer_copy`), fed the hidden states that
entered the real ones. :class:`HFDecoder` decodes greedily with the model's own
cache or by recomputing the prefix at every step.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from attnviz.core.attention import KVCache
from attnviz.i18n.message import msg
from attnviz.models.hf.parity import Reproducible, layer_copy, real_layers, rotation
from attnviz.models.source import KV_CACHES, CachedKV, check_batch, tiled


def dynamic_cache_tensors(cache) -> list[tuple[Tensor, Tensor]]:
    """(keys, values) of every layer of a transformers cache, whatever the installed version calls them.

    transformers >= 4.56 keeps ``cache.layers[i].keys / .values``; older releases
    kept ``cache.key_cache[i] / value_cache[i]``; the oldest returned tuples.
    Each tensor is (batch, n_kv_head, seq, head_dim).
    """
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    if hasattr(cache, "key_cache"):
        return list(zip(cache.key_cache, cache.value_cache, strict=True))
    return [(k, v) for k, v, *_ in cache]


def output_cache(out):
    """The cache a transformers forward returned: ``out.cache`` (transformers 5), ``past_key_values`` before."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


def batch_of_ids(source, text_or_ids: str | Sequence[int] | Tensor, n_tokens: int, batch: int) -> Tensor:
    """Token ids (batch, n_tokens): the text's ids (or the given ones) repeated until there are n_tokens."""
    if isinstance(text_or_ids, Tensor) and text_or_ids.dim() == 2:
        if text_or_ids.shape[1] < n_tokens:
            raise ValueError(f"the ids hold {text_or_ids.shape[1]} tokens, fewer than n_tokens ({n_tokens})")
        return text_or_ids[:, :n_tokens].to(source.device)
    ids = source.encode(text_or_ids, n_tokens).ids if isinstance(text_or_ids, str) else list(text_or_ids)
    return torch.tensor([tiled(ids, n_tokens)] * batch, dtype=torch.long, device=source.device)  # (B, n_tokens)


@torch.no_grad()
def prefill_our_layers(source: Reproducible, input_ids: Tensor) -> tuple[list[KVCache], object]:
    """A pretrained decoder's layers as our MultiHeadAttention (:func:`attnviz.models.hf.parity.layer_copy`),
    prefilled.

    The model runs once; its ``attn.in`` hook point hands each of our layers the hidden
    states that entered the real one, and our layer runs on them with a fresh
    :class:`KVCache` and the causal mask, in the model's dtype and on the layer's
    device. Each copy is built when its layer runs and dropped after it (one
    layer's weights at a time, not a second copy of every layer's). Returns our
    caches and transformers' cache of the same pass, so the two can be compared
    value by value.
    """
    theirs, rotate = real_layers(source), rotation(source)
    caches = [KVCache() for _ in theirs]

    def run_ours(index: int, hidden: Tensor) -> None:  # hidden: (B, T, d_model), what entered their layer
        scale = getattr(theirs[index], "scaling", None)
        layer_copy(source, index)(
            hidden, hidden, hidden, need_weights=False, kv_cache=caches[index], rotate=rotate, scale=scale,
            is_causal=True,
        )  # fmt: skip

    out = source.run_hooked(input_ids, {"attn.in": run_ours}, use_cache=True, logits_to_keep=1).output
    return caches, output_cache(out)


@torch.no_grad()
def prefill_kv(
    source,
    text_or_ids: str | Sequence[int] | Tensor,
    n_tokens: int,
    batch: int = 1,
    implementation: str = "transformers",
    dtype: torch.dtype | None = None,
) -> CachedKV:
    """What ``source``'s cache holds after a prefill of ``n_tokens`` tokens, ``batch`` sequences (see
    :meth:`attnviz.models.source.AttentionSource.prefill_kv`): transformers' DynamicCache, or attnviz's KVCache
    in copies of its layers, either in the model's own dtype (``dtype``: None or that one; ValueError for another,
    which would need a second copy of the model)."""
    if implementation not in KV_CACHES:
        raise ValueError(f"implementation {implementation!r} must be one of {KV_CACHES}")
    if dtype is not None and dtype != source.dtype:  # a second copy of a pretrained model in another dtype: no
        raise ValueError(f"{source.name} runs in {source.dtype}; its cache cannot be filled in {dtype}")
    check_batch(batch)
    input_ids = batch_of_ids(source, text_or_ids, n_tokens, batch)  # (B, n_tokens)
    if implementation == "attnviz":
        caches, _ = prefill_our_layers(source, input_ids)
        return CachedKV([(cache.k, cache.v) for cache in caches], "attnviz")
    out = source.run_hooked(input_ids, use_cache=True, logits_to_keep=1).output  # the one pass, asking for its cache
    return CachedKV(dynamic_cache_tensors(output_cache(out)), "transformers")


class HFDecoder:
    """Greedy decoding on a Hugging Face decoder: with its own cache (one new token a step), or recomputing the
    whole prefix at every step; no early stop at end-of-text."""

    def __init__(self, source, prompt: str, use_cache: bool) -> None:
        if not source.can_generate:
            raise ValueError(msg("kv_measure.no_lm_head", name=source.name))
        self.source, self.use_cache = source, use_cache
        self.prompt = source.encode(prompt, source.max_positions).ids
        self.n_prompt = len(self.prompt)
        self.ids = torch.tensor([self.prompt], device=source.device)  # what the next step feeds: (1, P)
        self.cache = None

    @torch.no_grad()
    def step(self) -> int:
        model = self.source.model
        if self.use_cache:
            out = model(input_ids=self.ids, cache=self.cache, use_cache=True, logits_to_keep=1)
            self.cache = output_cache(out)
        else:
            out = model(input_ids=self.ids, use_cache=False, logits_to_keep=1)
        next_id = int(out.logits[0, -1].argmax())
        new = torch.tensor([[next_id]], device=self.source.device)
        self.ids = new if self.use_cache else torch.cat([self.ids, new], dim=1)  # (1, 1) or (1, P + steps)
        return next_id

    def seek(self, tokens: Sequence[int]) -> None:
        if self.use_cache:
            raise ValueError("seek() is for decoding without the cache")
        self.ids = torch.tensor([self.prompt + list(tokens)], device=self.source.device)

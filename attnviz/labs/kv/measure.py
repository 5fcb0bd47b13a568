"""What a KV cache really holds, and what it buys when decoding: measured, not estimated.

:mod:`attnviz.labs.kv.memory` predicts the bytes of a KV cache from a model's
configuration. This module runs the model and counts them: every key and value
tensor a source's cache holds after a prefill (:meth:`AttentionSource.prefill_kv`:
transformers' ``DynamicCache``, or attnviz's own
:class:`~attnviz.core.attention.KVCache` in the embedded model's blocks or in a
pretrained decoder's layers copied into our ``MultiHeadAttention``). The two must
agree to the byte, which is what makes the estimates on the pages trustworthy.

It also times greedy decoding two ways (:meth:`AttentionSource.greedy_decoder`):
with the cache (each step reads one new token and attends over the cached keys
and values) and by recomputing the whole prefix at every step, which is what a
model without a cache has to do. The embedded model has no language-model head,
so its "next token" is read out against a table of made-up tokens: meaningless
as language, but the attention and cache work per step is exactly a decoder's.
Nothing here knows which family a source is: it asks the source.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from attnviz.models.source import KV_CACHES, AttentionSource

MODES = ("cache", "recompute")


@dataclass(frozen=True)
class MeasuredCache:
    """The bytes a KV cache holds after a prefill of ``seq_len`` tokens, ``batch`` sequences.

    per_layer: exact bytes (keys + values, numel * element_size) of each layer;
    tokens_per_layer: how many positions each layer caches; dtype: the cached
    tensors' dtype, as torch names it ("float32"); cuda_allocated_delta: the
    growth of ``torch.cuda.memory_allocated`` across the prefill with only the
    cache kept alive (None on the CPU; the caching allocator rounds every tensor
    up to 512 bytes, so it can exceed ``total_bytes`` slightly);
    implementation: whose cache was counted ("transformers" DynamicCache or
    "attnviz" KVCache).
    """

    per_layer: list[int]
    tokens_per_layer: list[int]
    batch: int
    seq_len: int
    dtype: str
    implementation: str
    cuda_allocated_delta: int | None = None

    @property
    def total_bytes(self) -> int:
        return sum(self.per_layer)

    @property
    def bytes_per_token(self) -> int:
        """Bytes per position of one sequence, every layer together."""
        return self.total_bytes // (self.batch * self.seq_len) if self.seq_len else 0


@dataclass(frozen=True)
class DecodeTiming:
    """Greedy decoding timed per generated token.

    seconds_per_token[i]: wall time to produce generated token i, which sits at
    position ``n_prompt + i`` (token 0 includes the prefill of the prompt in both
    modes); total: their sum; tokens: the generated ids (the embedded model's are
    indices into its made-up read-out vocabulary).
    """

    mode: str
    n_prompt: int
    seconds_per_token: list[float]
    tokens: list[int] = field(default_factory=list)

    @property
    def total(self) -> float:
        return sum(self.seconds_per_token)

    @property
    def positions(self) -> list[int]:
        return [self.n_prompt + i for i in range(len(self.seconds_per_token))]


def tensor_bytes(x: Tensor | None) -> int:
    """Exact bytes of a tensor's elements (numel * element_size); 0 for None."""
    return 0 if x is None else x.numel() * x.element_size()


def _cuda_allocated(device: torch.device | str) -> int | None:
    device = torch.device(device)
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    return torch.cuda.memory_allocated(device)


def measured_cache_bytes(
    source: AttentionSource,
    text_or_ids: str | Sequence[int] | Tensor,
    n_tokens: int,
    batch: int = 1,
    implementation: str = "transformers",
    dtype: torch.dtype | None = None,
) -> MeasuredCache:
    """The exact bytes of the KV cache after a prefill of ``n_tokens`` tokens, ``batch`` sequences.

    ``implementation`` picks transformers' cache or our KVCache in copies of a decoder's layers where the source
    has both (the embedded model has only its own); ``dtype`` the activations' (None: the model's).
    """
    if implementation not in KV_CACHES:
        raise ValueError(f"implementation {implementation!r} must be one of {KV_CACHES}")
    before = _cuda_allocated(source.device)
    cached = source.prefill_kv(text_or_ids, n_tokens, batch, implementation, dtype)
    after = _cuda_allocated(source.device)  # only the cache outlives the prefill
    keys = cached.layers[0][0]
    return MeasuredCache(
        per_layer=[tensor_bytes(k) + tensor_bytes(v) for k, v in cached.layers],
        tokens_per_layer=[int(k.shape[-2]) for k, _ in cached.layers],
        batch=int(keys.shape[0]),
        seq_len=n_tokens,
        dtype=str(keys.dtype).removeprefix("torch."),
        implementation=cached.implementation,
        cuda_allocated_delta=None if before is None else after - before,
    )


# --- decoding: with the cache, or recomputing the prefix at every step -----------------------------------


def _check_decode(n_new: int, mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} must be one of {MODES}")
    if n_new < 1:
        raise ValueError(f"the number of new tokens ({n_new}) must be at least 1")


def decode_timing(source: AttentionSource, prompt: str, n_new: int, mode: str = "cache") -> DecodeTiming:
    """Greedy decoding of ``n_new`` tokens after ``prompt``, timed per token; no early stop at end-of-text.

    mode "cache": the prompt is prefilled once, then each step feeds one token
    and attends over the cache (transformers' DynamicCache for a Hugging Face
    decoder, attnviz's KVCache for the embedded model). mode "recompute": every
    step runs the whole prefix again, without a cache.
    """
    _check_decode(n_new, mode)
    decoder = source.greedy_decoder(prompt, use_cache=mode == "cache")
    seconds, generated = [], []
    for _ in range(n_new):
        start = time.perf_counter()
        generated.append(decoder.step())
        seconds.append(time.perf_counter() - start)
    return DecodeTiming(mode=mode, n_prompt=decoder.n_prompt, seconds_per_token=seconds, tokens=generated)


def recompute_seconds_at(
    source: AttentionSource, prompt: str, tokens: Sequence[int], steps: Sequence[int]
) -> list[float]:
    """Wall time of recompute step ``i`` for each i in ``steps``: one full pass over the prompt and ``tokens[:i]``.

    A sampled stand-in for ``decode_timing(..., mode="recompute")`` when the whole
    run would take too long (its cost grows with the square of the length):
    ``tokens`` are the ids a cached run generated (greedy decoding without a
    cache produces the same ones), so step i reads exactly the prefix it would.
    """
    decoder = source.greedy_decoder(prompt, use_cache=False)
    seconds = []
    for i in steps:
        if not 0 <= i < len(tokens):
            raise ValueError(f"step {i} must be from 0 to {len(tokens) - 1}")
        decoder.seek(tokens[:i])
        start = time.perf_counter()
        decoder.step()
        seconds.append(time.perf_counter() - start)
    return seconds

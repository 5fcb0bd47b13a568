"""What a KV cache really holds, and what it buys when decoding: measured, not estimated.

:mod:`attnviz.kv_memory` predicts the bytes of a KV cache from a model's
configuration. This module runs the model and counts them: every key and value
tensor left in transformers' ``DynamicCache`` after a prefill, or in attnviz's
own :class:`~attnviz.attention.KVCache` (the embedded model's blocks, or a
pretrained decoder's layers copied into our ``MultiHeadAttention``). The two must
agree to the byte, which is what makes the estimates on the pages trustworthy.

It also times greedy decoding two ways: with the cache (each step reads one new
token and attends over the cached keys and values) and by recomputing the whole
prefix at every step, which is what a model without a cache has to do. The
embedded model has no language-model head, so its "next token" is the argmax
of the last hidden state against a fixed table of random token embeddings
(a tied read-out over a small vocabulary of made-up tokens): meaningless as
language, but the attention and cache work per step is exactly a decoder's.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from attnviz.attention import KVCache
from attnviz.embedded import EmbeddedModel, sinusoidal_positions, token_embedding
from attnviz.i18n import t

if TYPE_CHECKING:
    from attnviz.hf_source import HFSource

IMPLEMENTATIONS = ("transformers", "attnviz")
MODES = ("cache", "recompute")
READOUT_VOCAB = 512  # made-up tokens the embedded model "generates" from


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


def _output_cache(out):
    """The cache a transformers forward returned: ``out.cache`` (transformers 5), ``past_key_values`` before."""
    return out.cache if hasattr(out, "cache") else out.past_key_values


def _cuda_allocated(device: torch.device | str) -> int | None:
    device = torch.device(device)
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    return torch.cuda.memory_allocated(device)


def _batch_of_ids(source: HFSource, text_or_ids: str | Sequence[int] | Tensor, n_tokens: int, batch: int) -> Tensor:
    """Token ids (batch, n_tokens): the text's ids (or the given ones) repeated until there are n_tokens."""
    if isinstance(text_or_ids, Tensor) and text_or_ids.dim() == 2:
        if text_or_ids.shape[1] < n_tokens:
            raise ValueError(f"the ids hold {text_or_ids.shape[1]} tokens, fewer than n_tokens ({n_tokens})")
        return text_or_ids[:, :n_tokens].to(source.device)
    ids = source.encode(text_or_ids, n_tokens).ids if isinstance(text_or_ids, str) else list(text_or_ids)
    return torch.tensor([_tiled(ids, n_tokens)] * batch, dtype=torch.long, device=source.device)  # (B, n_tokens)


def _tiled(items: list, n: int) -> list:
    """``items`` repeated and cut to exactly ``n`` (ValueError when there is nothing to repeat)."""
    if n < 1:
        raise ValueError(f"n_tokens ({n}) must be at least 1")
    if not items:
        raise ValueError(t("kv_measure.no_tokens"))
    return (items * (n // len(items) + 1))[:n]


def _check_batch(batch: int) -> None:
    if batch < 1:
        raise ValueError(f"batch ({batch}) must be at least 1")


@torch.no_grad()
def measured_hf_cache(
    source: HFSource, text_or_ids: str | Sequence[int] | Tensor, n_tokens: int, batch: int = 1
) -> MeasuredCache:
    """Prefill a decoder with ``use_cache=True`` and count every byte of transformers' cache.

    ``text_or_ids``: a text (tokenised, then repeated to n_tokens), a list of ids,
    or a (batch, T) tensor of ids. A list or text is repeated for every sequence.
    """
    _check_batch(batch)
    input_ids = _batch_of_ids(source, text_or_ids, n_tokens, batch)  # (B, n_tokens)
    before = _cuda_allocated(source.device)
    out = source.model(input_ids=input_ids, use_cache=True, logits_to_keep=1)
    cache = _output_cache(out)
    del out  # keep only the cache alive for the allocator's count
    after = _cuda_allocated(source.device)
    layers = dynamic_cache_tensors(cache)
    return MeasuredCache(
        per_layer=[tensor_bytes(k) + tensor_bytes(v) for k, v in layers],
        tokens_per_layer=[int(k.shape[-2]) for k, _ in layers],
        batch=int(input_ids.shape[0]),
        seq_len=int(input_ids.shape[1]),
        dtype=str(layers[0][0].dtype).removeprefix("torch."),
        implementation="transformers",
        cuda_allocated_delta=None if before is None else after - before,
    )


def _measured_kvcaches(caches: list[KVCache], batch: int, seq_len: int, before: int | None, device) -> MeasuredCache:
    after = _cuda_allocated(device)
    return MeasuredCache(
        per_layer=[cache.nbytes for cache in caches],
        tokens_per_layer=[len(cache) for cache in caches],
        batch=batch,
        seq_len=seq_len,
        dtype=str(caches[0].k.dtype).removeprefix("torch."),
        implementation="attnviz",
        cuda_allocated_delta=None if before is None else after - before,
    )


@torch.no_grad()
def prefill_our_layers(source: HFSource, input_ids: Tensor) -> tuple[list[KVCache], object]:
    """A pretrained decoder's layers as our MultiHeadAttention (:func:`attnviz.parity.our_layers`), prefilled.

    The model runs once; a forward pre-hook hands each of our layers the hidden
    states that entered the real one, and our layer runs on them with a fresh
    :class:`KVCache` and the causal mask. Returns our caches and transformers'
    cache of the same pass, so the two can be compared value by value.
    """
    from attnviz.parity import our_layers

    theirs, ours, rotate = our_layers(source)
    caches = [KVCache() for _ in ours]
    owner = threading.get_ident()

    def hook(index: int):
        def run_ours(module, args, kwargs):
            if threading.get_ident() != owner:  # the model is shared between sessions
                return
            hidden = args[0] if args else kwargs["hidden_states"]  # (B, T, d_model)
            scale = getattr(module, "scaling", None)
            attention = ours[index]
            attention(
                hidden,
                hidden,
                hidden,
                need_weights=False,
                kv_cache=caches[index],
                rotate=rotate,
                scale=scale,
                is_causal=True,
            )

        return run_ours

    hooks = [module.register_forward_pre_hook(hook(i), with_kwargs=True) for i, module in enumerate(theirs)]
    try:
        out = source.model(input_ids=input_ids, use_cache=True, logits_to_keep=1)
    finally:
        for handle in hooks:
            handle.remove()
    return caches, _output_cache(out)


@torch.no_grad()
def measured_our_layers_cache(
    source: HFSource, text_or_ids: str | Sequence[int] | Tensor, n_tokens: int, batch: int = 1
) -> MeasuredCache:
    """The bytes our :class:`KVCache` holds when our copies of a decoder's layers prefill ``n_tokens``.

    The CUDA delta (if any) includes transformers' own cache of the same pass, so it is left None.
    """
    _check_batch(batch)
    input_ids = _batch_of_ids(source, text_or_ids, n_tokens, batch)
    caches, _ = prefill_our_layers(source, input_ids)
    return _measured_kvcaches(caches, int(input_ids.shape[0]), int(input_ids.shape[1]), None, source.device)


# --- the embedded model, decoded with attnviz's KVCache --------------------------------------------------


def embedded_step(model: EmbeddedModel, x: Tensor, caches: list[KVCache] | None) -> Tensor:
    """x (B, T, d_model) through every block with causal attention -> (B, T, d_model).

    With ``caches`` (one per block) the new positions attend over everything
    cached before them and are appended; without, x is the whole sequence.
    The same pre-norm residual block as :class:`attnviz.embedded.Block`, on the fused path.
    """
    for index, block in enumerate(model.blocks):
        h = block.ln_attn(x)
        cache = None if caches is None else caches[index]
        attn_out, _ = block.attn(h, h, h, need_weights=False, kv_cache=cache, is_causal=True)  # (B, T, d_model)
        x = x + attn_out
        x = x + block.mlp(block.ln_mlp(x))
    return x


@torch.no_grad()
def measured_embedded_cache(
    model: EmbeddedModel, text: str, n_tokens: int, batch: int = 1, dtype: torch.dtype = torch.float32
) -> MeasuredCache:
    """Prefill the embedded model's blocks with one :class:`KVCache` per block and count their bytes.

    ``dtype`` is the dtype of the activations and so of the cache (a copy of the model is cast to it).
    """
    _check_batch(batch)
    tokens = _tiled([t.text for t in model.encode(text, n_tokens).tokens], n_tokens)
    positions = torch.arange(n_tokens)[None].expand(batch, n_tokens)  # (B, T)
    if next(model.parameters()).dtype != dtype:
        model = copy.deepcopy(model).to(dtype)  # the model may be shared: cast a copy
    caches = [KVCache() for _ in model.blocks]
    before = _cuda_allocated(model.device)
    embedded_step(model, model.embed([tokens] * batch, positions).to(dtype), caches)  # only the caches outlive it
    return _measured_kvcaches(caches, batch, n_tokens, before, model.device)


def measured_cache_bytes(
    source: HFSource | EmbeddedModel,
    text_or_ids: str | Sequence[int] | Tensor,
    n_tokens: int,
    batch: int = 1,
    implementation: str = "transformers",
) -> MeasuredCache:
    """The exact bytes of the KV cache after a prefill of ``n_tokens`` tokens, ``batch`` sequences.

    A Hugging Face decoder counts transformers' cache (``implementation="transformers"``)
    or our KVCache in copies of its layers (``"attnviz"``); the embedded model
    always runs attnviz's KVCache.
    """
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation {implementation!r} must be one of {IMPLEMENTATIONS}")
    if isinstance(source, EmbeddedModel):
        return measured_embedded_cache(source, str(text_or_ids), n_tokens, batch)
    if implementation == "attnviz":
        return measured_our_layers_cache(source, text_or_ids, n_tokens, batch)
    return measured_hf_cache(source, text_or_ids, n_tokens, batch)


# --- decoding: with the cache, or recomputing the prefix at every step -----------------------------------


def _check_decode(n_new: int, mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} must be one of {MODES}")
    if n_new < 1:
        raise ValueError(f"the number of new tokens ({n_new}) must be at least 1")


def readout_table(model: EmbeddedModel, vocab: int = READOUT_VOCAB) -> Tensor:
    """The embedded model's stand-in vocabulary: (vocab, d_model) embeddings of made-up tokens ⟨0⟩, ⟨1⟩, ...

    Used both to read the next token out of the last hidden state (argmax of
    hidden · tableᵀ, a tied read-out) and to embed it for the next step.
    """
    d_model, seed = model.d_model, model.config.seed
    return torch.stack([token_embedding(f"⟨{i}⟩", d_model, seed) for i in range(vocab)]).to(model.device)


@torch.no_grad()
def _decode_embedded(model: EmbeddedModel, prompt: str, n_new: int, mode: str, vocab: int) -> DecodeTiming:
    if not model.causal:
        raise ValueError(t("kv_measure.needs_causal"))
    prompt_tokens = [t.text for t in model.encode(prompt, model.max_positions).tokens]
    n_prompt = len(prompt_tokens)
    if n_prompt < 1:
        raise ValueError(t("kv_measure.empty_prompt"))
    table = readout_table(model, vocab)  # (vocab, d_model)
    positions = sinusoidal_positions(n_prompt + n_new, model.d_model).to(model.device)  # (P + n_new, d_model)
    x = model.embed([prompt_tokens], torch.arange(n_prompt)[None])  # (1, P, d_model)
    caches = [KVCache() for _ in model.blocks] if mode == "cache" else None
    seconds, generated = [], []
    for step in range(n_new):
        start = time.perf_counter()
        hidden = embedded_step(model, x, caches)  # (1, T, d_model)
        next_id = int((hidden[0, -1] @ table.T).argmax())
        new = (table[next_id] + positions[n_prompt + step])[None, None]  # (1, 1, d_model)
        x = new if caches is not None else torch.cat([x, new], dim=1)  # cache: only the new token goes in
        seconds.append(time.perf_counter() - start)
        generated.append(next_id)
    return DecodeTiming(mode=mode, n_prompt=n_prompt, seconds_per_token=seconds, tokens=generated)


@torch.no_grad()
def _decode_hf(source: HFSource, prompt: str, n_new: int, mode: str) -> DecodeTiming:
    if not source.can_generate:
        raise ValueError(t("kv_measure.no_lm_head", name=source.name))
    ids = torch.tensor([source.encode(prompt, source.max_positions).ids], device=source.device)  # (1, P)
    n_prompt = ids.shape[1]
    seconds, generated = [], []
    cache, step_ids = None, ids
    for _ in range(n_new):
        start = time.perf_counter()
        if mode == "cache":
            out = source.model(input_ids=step_ids, cache=cache, use_cache=True, logits_to_keep=1)
            cache = _output_cache(out)
        else:
            out = source.model(input_ids=step_ids, use_cache=False, logits_to_keep=1)
        next_id = int(out.logits[0, -1].argmax())
        new = torch.tensor([[next_id]], device=source.device)
        step_ids = new if mode == "cache" else torch.cat([step_ids, new], dim=1)  # (1, 1) or (1, P + step + 1)
        seconds.append(time.perf_counter() - start)
        generated.append(next_id)
    return DecodeTiming(mode=mode, n_prompt=n_prompt, seconds_per_token=seconds, tokens=generated)


def decode_timing(
    source: HFSource | EmbeddedModel, prompt: str, n_new: int, mode: str = "cache", vocab: int = READOUT_VOCAB
) -> DecodeTiming:
    """Greedy decoding of ``n_new`` tokens after ``prompt``, timed per token; no early stop at end-of-text.

    mode "cache": the prompt is prefilled once, then each step feeds one token
    and attends over the cache (transformers' DynamicCache for a Hugging Face
    decoder, attnviz's KVCache for the embedded model). mode "recompute": every
    step runs the whole prefix again, without a cache. ``vocab`` is the size of
    the embedded model's made-up read-out vocabulary (see :func:`readout_table`).
    """
    _check_decode(n_new, mode)
    if isinstance(source, EmbeddedModel):
        return _decode_embedded(source, prompt, n_new, mode, vocab)
    return _decode_hf(source, prompt, n_new, mode)


@torch.no_grad()
def recompute_seconds_at(
    source: HFSource | EmbeddedModel,
    prompt: str,
    tokens: Sequence[int],
    steps: Sequence[int],
    vocab: int = READOUT_VOCAB,
) -> list[float]:
    """Wall time of recompute step ``i`` for each i in ``steps``: one full pass over the prompt and ``tokens[:i]``.

    A sampled stand-in for ``decode_timing(..., mode="recompute")`` when the whole
    run would take too long (its cost grows with the square of the length):
    ``tokens`` are the ids a cached run generated (greedy decoding without a
    cache produces the same ones), so step i reads exactly the prefix it would.
    """
    if isinstance(source, EmbeddedModel):
        prompt_tokens = [t.text for t in source.encode(prompt, source.max_positions).tokens]
        n_prompt = len(prompt_tokens)
        table = readout_table(source, vocab)  # (vocab, d_model)
        positions = sinusoidal_positions(n_prompt + len(tokens), source.d_model).to(source.device)
        generated = table[list(tokens)] + positions[n_prompt:]  # (n_new, d_model)
        x = torch.cat([source.embed([prompt_tokens], torch.arange(n_prompt)[None]), generated[None]], dim=1)

        def step(length: int) -> None:
            hidden = embedded_step(source, x[:, :length], None)  # (1, length, d_model)
            int((hidden[0, -1] @ table.T).argmax())

    else:
        ids = source.encode(prompt, source.max_positions).ids
        n_prompt = len(ids)
        everything = torch.tensor([ids + list(tokens)], device=source.device)  # (1, P + n_new)

        def step(length: int) -> None:
            out = source.model(input_ids=everything[:, :length], use_cache=False, logits_to_keep=1)
            int(out.logits[0, -1].argmax())

    seconds = []
    for i in steps:
        if not 0 <= i < len(tokens):
            raise ValueError(f"step {i} must be from 0 to {len(tokens) - 1}")
        start = time.perf_counter()
        step(n_prompt + i)
        seconds.append(time.perf_counter() - start)
    return seconds

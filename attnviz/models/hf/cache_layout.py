"""What transformers' own cache holds for a config, measured from its modeling code on the ``meta`` device.

A rule written per config field can only be as right as its author's reading of
each architecture (Falcon broadcasts K and V to every query head before caching;
Gemma 4's global layers keep wider heads; a DeepSeek-V3.2 layer keeps its
indexer's keys too). Instead, the architecture's own code is run: the model is
built on the ``meta`` device (shapes, no memory, no weights), a prefill of
(batch, tokens) runs through it, and the cache it returns is counted. That is
what a real prefill on any device holds, to the byte, for every architecture
whose code runs on meta tensors; for the few that do not (code that reads a
value, ``.item()``), None, and the caller keeps its rules.

A meta prefill costs about a millisecond per operation whatever the length (each
is a Python shape rule), so seconds for a deep model, and far more where a layer
loops over the tokens: the Mamba layers' reference scan took Jamba v0.1 minutes.
So two things are cut, neither changing a byte. Layers built alike (same
submodules, shapes, plain attributes and layer type: :func:`_signature`) run
once, the first of each group standing for the rest, which is checked on the
cache it leaves (:func:`_shared_prefill`). And the prefill is run on
:data:`PROBE_TOKENS` tokens, each cache layer then continued to the asked length
by its own ``update`` (a decode of the missing tokens leaves what a longer
prefill leaves: a full layer keeps them all, a sliding one its last
``sliding_window - 1``). Only transformers' own cache layer classes are
continued, and only when the probe left exactly the tokens a prefill leaves in
them; anything else (a layer class of a model's own, a cache padded or offset)
is measured by a prefill of the full length through every layer, as before.

Counted: every tensor a cache layer keeps for attention (keys, values, an
indexer's keys), not the recurrent states of linear-attention layers.
"""

from __future__ import annotations

import copy
import functools
import json
import threading

import torch

CACHE_TENSORS = ("keys", "values", "indexer_keys")  # what a cache layer keeps per token for attention
MEASURE_TOKENS = 8192  # a longer prefill is measured at this many tokens and extended layer by layer
PROBE_TOKENS = 7  # the prefill that is run; odd, so that a cache padded to a multiple shows it
_lock = threading.Lock()  # transformers' logging level and the meta build are process-wide


def _cache_layers(cache) -> list:
    if hasattr(cache, "layers"):
        return list(cache.layers)
    return []


def _layer_numel(layer) -> tuple[int, int]:
    """(elements, tokens) a cache layer holds for attention: 0 tokens for a linear-attention layer's state."""
    numel, tokens = 0, 0
    for name in CACHE_TENSORS:
        tensor = getattr(layer, name, None)
        if isinstance(tensor, torch.Tensor):
            numel += tensor.numel()
            if name == "keys" and tensor.ndim >= 3:
                tokens = tensor.shape[-2]
    return numel, tokens


@functools.lru_cache(maxsize=64)
def _prefill_layers(config_json: str, batch: int, n_tokens: int, share: bool = True) -> tuple | None:
    """The cache layers transformers leaves after a meta prefill of (batch, n_tokens); None when it cannot run.

    With ``share``, layers built alike run once (:func:`_shared_prefill`); when that cannot be shown to leave
    the same cache, every layer runs. Cached: read the layers, never update them (:func:`_continued` copies).
    """
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    raw = json.loads(config_json)
    model_type = raw.get("model_type")
    with _lock:
        keep = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        try:
            config = AutoConfig.for_model(model_type, **{k: v for k, v in raw.items() if k != "model_type"})
            if type(config) not in AutoModelForCausalLM._model_mapping:
                return None
            layers = None
            if share:
                try:
                    layers = _shared_prefill(config, batch, n_tokens)
                except Exception:  # a layer that reads another's cache, a loop over the stack by index: run them all
                    layers = None
            if layers is None:
                layers = _cache_layers(_prefill(_meta_model(config), batch, n_tokens))
        except Exception:  # code that reads values (.item()) or rejects the config: no measurement
            return None
        finally:
            hf_logging.set_verbosity(keep)
    return tuple(layers) if layers else None


def _meta_model(config):
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        # bfloat16: the meta kernels of grouped expert matmuls take no other dtype; shapes are the same
        return AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.bfloat16).eval()


def _prefill(model, batch: int, n_tokens: int):
    """The cache a meta prefill of (batch, n_tokens) returns."""
    ids = torch.zeros(batch, n_tokens, dtype=torch.long, device="meta")
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    return getattr(out, "cache", None) or getattr(out, "past_key_values", None)


# attributes that number a layer; any other attribute that differs puts two layers in different groups
_INDEX_NAMES = frozenset({"layer_idx", "layer_id", "layer_index", "layer_number", "block_idx", "idx"})
_PLAIN = (int, float, str, bool, type(None))


def _signature(layer: torch.nn.Module, layer_type) -> tuple:
    """What decides the cache a decoder layer leaves: its layer type, and every submodule's class, parameter
    and buffer shapes and plain attributes (a window, a head count, a flag), but not its index."""
    parts: list = [repr(layer_type)]
    for name, module in layer.named_modules():
        plain = sorted(
            (key, repr(value))
            for key, value in vars(module).items()
            if not key.startswith("_")
            and key not in _INDEX_NAMES
            and (
                isinstance(value, _PLAIN)
                or (isinstance(value, list | tuple) and all(isinstance(v, _PLAIN) for v in value))
            )
        )
        tensors = [
            (key, tuple(t.shape), str(t.dtype))
            for key, t in (*module.named_parameters(recurse=False), *module.named_buffers(recurse=False))
        ]
        parts.append((name, type(module).__qualname__, tuple(plain), tuple(tensors)))
    return tuple(parts)


def _shared_prefill(config, batch: int, n_tokens: int) -> list | None:
    """The cache layers of a meta prefill in which only the first of each group of decoder layers built alike
    (:func:`_signature`) runs, its cache layer then standing for the others': a 126-layer model costs as much as
    one layer of each kind. None when the model's layer stack cannot be found, or when the prefill did not
    write each running layer's own cache layer and nothing else, or left layers of one group with different
    cache layer classes or windows: then every layer must run."""
    model = _meta_model(config)
    text = config.get_text_config(decoder=True)
    n_layer = getattr(text, "num_hidden_layers", None)
    stacks = [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if isinstance(child, torch.nn.ModuleList) and n_layer and len(child) == n_layer > 1
    ]
    if len(stacks) != 1:
        return None
    parent, name, stack = stacks[0]
    types = getattr(text, "layer_types", None)
    if not isinstance(types, list | tuple) or len(types) != n_layer:
        types = [None] * n_layer
    first: dict[tuple, int] = {}
    runs_as = [first.setdefault(_signature(layer, types[i]), i) for i, layer in enumerate(stack)]
    kept = sorted(set(runs_as))
    if len(kept) == n_layer:
        return _cache_layers(_prefill(model, batch, n_tokens))
    setattr(parent, name, torch.nn.ModuleList([stack[i] for i in kept]))
    layers = _cache_layers(_prefill(model, batch, n_tokens))
    if len(layers) != n_layer:
        return None
    for index, source in enumerate(runs_as):
        if index == source:
            continue
        written = any(getattr(layers[index], attr, None) is not None for attr in CACHE_TENSORS)
        if written or type(layers[index]) is not type(layers[source]):
            return None
        if getattr(layers[index], "sliding_window", None) != getattr(layers[source], "sliding_window", None):
            return None
        layers[index] = layers[source]
    return layers


def _measure_every_layer(config_json: str, batch: int, n_tokens: int) -> tuple[tuple[int, int], ...] | None:
    """Per cache layer, (elements, tokens) after a meta prefill of (batch, n_tokens) through every layer."""
    layers = _prefill_layers(config_json, batch, n_tokens, share=False)
    return None if layers is None else tuple(_layer_numel(layer) for layer in layers)


@functools.lru_cache(maxsize=256)
def _measure(config_json: str, batch: int, n_tokens: int) -> tuple[tuple[int, int], ...] | None:
    """Per cache layer, (elements, tokens) after a meta prefill of (batch, n_tokens); None when it cannot run.

    The prefill itself is run at the full length only when the probe's layers cannot be continued."""
    probe = min(n_tokens, PROBE_TOKENS)
    layers = _prefill_layers(config_json, batch, probe)
    if layers is None:
        return None
    if probe < n_tokens and not all(_continues(layer, batch, probe) for layer in layers):
        return _measure_every_layer(config_json, batch, n_tokens)
    return tuple(_layer_numel(_continued(layer, n_tokens - probe)) for layer in layers)


@functools.cache
def _layer_classes() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """(layers that grow by concatenation, layers that hold no per-token tensor) among transformers' own."""
    from transformers import cache_utils

    def named(*names: str) -> tuple[type, ...]:
        return tuple(getattr(cache_utils, name) for name in names if hasattr(cache_utils, name))

    growing = named(
        "DynamicLayer",
        "DynamicSlidingWindowLayer",
        "DynamicIndexedLayer",
        "LinearAttentionAndFullAttentionLayer",
        "LinearAttentionAndSlidingWindowAttentionLayer",
    )
    return growing, named("LinearAttentionLayer", "DummyLayer")


def _kept(layer, n_tokens: int) -> int:
    """Tokens a prefill of ``n_tokens`` leaves in ``layer``: all, or a sliding layer's ``[-sliding_window + 1:]``."""
    window = getattr(layer, "sliding_window", None)
    return n_tokens if window is None else len(range(n_tokens)[-window + 1 :])


def _continues(layer, batch: int, n_tokens: int) -> bool:
    """Whether ``layer`` is one of transformers' cache layers and holds what its rule says a prefill of
    (batch, n_tokens) leaves: then a longer prefill leaves what its ``update`` adds to it."""
    growing, stateless = _layer_classes()
    tensors = [getattr(layer, name, None) for name in CACHE_TENSORS]
    if type(layer) in stateless:
        return all(tensor is None for tensor in tensors)
    if type(layer) not in growing or getattr(layer, "record_past", False):
        return False
    keys, values, indexer = tensors
    if keys is None and values is None and indexer is None:
        return True  # a layer the model never wrote to
    if not (isinstance(keys, torch.Tensor) and isinstance(values, torch.Tensor)) or keys.ndim != 4:
        return False
    kept = _kept(layer, n_tokens)
    if values.ndim != 4 or keys.shape[0] != batch or values.shape[0] != batch:
        return False
    if keys.shape[-2] != kept or values.shape[-2] != kept:
        return False
    if indexer is None:
        return True
    return isinstance(indexer, torch.Tensor) and indexer.ndim == 3 and tuple(indexer.shape[:2]) == (batch, n_tokens)


def _continued(layer, extra: int):
    """A copy of a prefilled cache layer, updated with ``extra`` more tokens of the shapes it holds (meta tensors)."""
    keys = getattr(layer, "keys", None)
    if extra == 0 or not isinstance(keys, torch.Tensor):
        return layer
    values, indexer = layer.values, getattr(layer, "indexer_keys", None)

    def more(tensor: torch.Tensor, dim: int) -> torch.Tensor:
        shape = list(tensor.shape)
        shape[dim] = extra
        return torch.empty(shape, dtype=tensor.dtype, device="meta")

    grown = copy.copy(layer)
    grown.update(more(keys, -2), more(values, -2))  # (B, n_kv_head, extra, head_dim)
    if isinstance(indexer, torch.Tensor):
        grown.update_indexer(more(indexer, 1))  # (B, extra, index_head_dim)
    return grown


def transformers_cache_elements(
    raw: dict, batch: int, seq_len: int, sliding: tuple[int | None, ...], *, probe: bool = True
) -> int | None:
    """Elements transformers' cache holds after a prefill of (batch, seq_len) of the model ``raw`` configures.

    Up to :data:`MEASURE_TOKENS` tokens the prefill is measured as it is (probed short and continued, see the
    module's docstring). Beyond, it is measured at that length and each layer extended: one that kept every
    token keeps ``seq_len`` (or its sliding window's ``sliding[i]`` when one is given for it), one that kept
    fewer keeps that many. None when the modeling code cannot run on the meta device. ``probe=False`` runs the
    prefill at that length through every layer, as attnviz did before the probe (for tests and benchmarks: the
    same number, slower).
    """
    config_json = json.dumps(raw, sort_keys=True)
    n = min(seq_len, MEASURE_TOKENS)
    layers = _measure(config_json, batch, n) if probe else _measure_every_layer(config_json, batch, n)
    if layers is None:
        return None
    total = 0
    for index, (numel, tokens) in enumerate(layers):
        if seq_len == n or tokens < n or not tokens:
            total += numel
            continue
        cap = sliding[index] if index < len(sliding) else None
        kept = seq_len if cap is None else min(seq_len, cap)
        total += numel // tokens * kept
    return total

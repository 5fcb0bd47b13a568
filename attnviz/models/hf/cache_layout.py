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

Counted: every tensor a cache layer keeps for attention (keys, values, an
indexer's keys), not the recurrent states of linear-attention layers.
"""

from __future__ import annotations

import functools
import json
import threading

import torch

CACHE_TENSORS = ("keys", "values", "indexer_keys")  # what a cache layer keeps per token for attention
MEASURE_TOKENS = 8192  # a longer prefill is measured at this many tokens and extended layer by layer
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
def _measure(config_json: str, batch: int, n_tokens: int) -> tuple[tuple[int, int], ...] | None:
    """Per cache layer, (elements, tokens) after a meta prefill of (batch, n_tokens); None when it cannot run."""
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
            with torch.device("meta"):
                # bfloat16: the meta kernels of grouped expert matmuls take no other dtype; shapes are the same
                model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.bfloat16)
            ids = torch.zeros(batch, n_tokens, dtype=torch.long, device="meta")
            with torch.no_grad():
                out = model.eval()(input_ids=ids, use_cache=True, logits_to_keep=1)
            cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        except Exception:  # code that reads values (.item()) or rejects the config: no measurement
            return None
        finally:
            hf_logging.set_verbosity(keep)
    layers = _cache_layers(cache)
    return tuple(_layer_numel(layer) for layer in layers) if layers else None


def transformers_cache_elements(raw: dict, batch: int, seq_len: int, sliding: tuple[int | None, ...]) -> int | None:
    """Elements transformers' cache holds after a prefill of (batch, seq_len) of the model ``raw`` configures.

    Up to :data:`MEASURE_TOKENS` tokens the prefill is measured as it is. Beyond, it is measured at that
    length and each layer extended: one that kept every token keeps ``seq_len`` (or its sliding window's
    ``sliding[i]`` when one is given for it), one that kept fewer keeps that many. None when the modeling
    code cannot run on the meta device.
    """
    config_json = json.dumps(raw, sort_keys=True)
    n = min(seq_len, MEASURE_TOKENS)
    layers = _measure(config_json, batch, n)
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

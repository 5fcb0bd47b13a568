"""What serving engines allocate for a KV cache: vLLM's paged blocks, llama.cpp's padded cells and
transformers' DynamicCache, each rule with the source it comes from, beside the minimum of :mod:`attnviz.labs.kv.memory`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from attnviz import settings
from attnviz.i18n.message import Text, msg
from attnviz.labs.kv.config import KVConfig
from attnviz.labs.kv.memory import bytes_per_element, check_count, check_dtype, layer_token_bytes
from attnviz.models.registry import transformers_cache_elements


@dataclass(frozen=True)
class EngineFigure:
    engine: str
    total_bytes: int | None  # None: the engine cannot store this cache dtype (the rule says why)
    rule: Text
    source: str


# ---------------------------------------------------------------------------------------------------------------
# what engines allocate

VLLM_SOURCE = "https://github.com/vllm-project/vllm/blob/main/vllm/v1/kv_cache_interface.py"  # SlidingWindowSpec
LLAMACPP_SOURCE = "https://github.com/ggml-org/llama.cpp/blob/master/src/llama-kv-cache-iswa.cpp"
HF_SOURCE = "https://github.com/huggingface/transformers/blob/main/src/transformers/cache_utils.py"
LLAMACPP_PAD = 256  # llama-kv-cache-iswa.cpp: "the SWA cache is always padded to 256"; n_ctx is padded alike
# ggml block sizes (bytes, values) for the cache types our dtypes map to; fp8 has no ggml cache type
_GGML_BLOCKS = {"fp32": (4, 1), "fp16": (2, 1), "bf16": (2, 1), "int8": (34, 32), "int4": (20, 32)}
_GGML_NAMES = {"fp32": "f32", "fp16": "f16", "bf16": "bf16", "int8": "q8_0", "int4": "q4_1"}
HF_DTYPES = ("fp32", "bf16", "fp16")  # what DynamicCache stores: the activations' dtype, never a quantised one


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _sum_layers(cfg: KVConfig, tokens_of, bytes_of) -> int | None:
    total = 0
    for kind in cfg.layer_kinds:
        size = bytes_of(kind)
        if size is None:
            return None
        total += tokens_of(kind) * size
    return total


def _vllm(cfg: KVConfig, batch: int, seq_len: int, dtype: str, block: int, batched: int, hybrid: bool):
    per_value = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}.get(dtype)  # fp8: one scale per tensor, not per group

    def tokens(kind: str) -> int:
        if kind == "linear":
            return 0
        if kind == "sliding" and hybrid:
            return (_cdiv(min(cfg.window - 1 + batched, seq_len), block) + 1) * block
        return _cdiv(seq_len, block) * block

    def bytes_of(kind: str) -> int | None:
        rows, values = cfg.row_values(kind)
        return None if per_value is None else rows * values * per_value

    total = _sum_layers(cfg, tokens, bytes_of)
    if total is None:
        rule = msg("kv_memory.vllm_no_dtype", dtype=dtype)
    else:
        sliding = (
            msg("kv_memory.vllm_sliding", batched=batched, block=block) if hybrid else msg("kv_memory.vllm_no_hybrid")
        )
        rule = msg("kv_memory.vllm_rule", block=block, sliding=sliding)
    return EngineFigure("vLLM", None if total is None else batch * total, rule, VLLM_SOURCE)


def _llamacpp(cfg: KVConfig, batch: int, seq_len: int, dtype: str, n_ubatch: int, n_seq: int):
    full = _cdiv(seq_len, LLAMACPP_PAD) * LLAMACPP_PAD
    swa = _cdiv(min(full, (cfg.window or 0) + n_ubatch), LLAMACPP_PAD) * LLAMACPP_PAD
    block = _GGML_BLOCKS.get(dtype)

    def ggml_row(values: int) -> int | None:
        if block is None or values % block[1]:
            return None
        return values // block[1] * block[0]

    def bytes_of(kind: str) -> int | None:
        if kind == "linear":
            return 0
        if kind == "mla":  # K: latent + rope (key_length 576), V: latent (value_length 512), one KV head
            k, v = ggml_row(cfg.kv_lora_rank + cfg.qk_rope_head_dim), ggml_row(cfg.kv_lora_rank)
            return None if k is None or v is None else k + v
        row = ggml_row(cfg.head_dim)
        return None if row is None else 2 * cfg.n_kv_head * row

    total = _sum_layers(cfg, lambda kind: swa if kind == "sliding" else full, bytes_of)
    streams = max(n_seq, batch)
    if total is None:
        rule = (
            msg("kv_memory.llamacpp_no_dtype", dtype=dtype)
            if block is None
            else msg("kv_memory.llamacpp_blocks", name=_GGML_NAMES[dtype], size=block[1])
        )
    else:
        rule = msg(
            "kv_memory.llamacpp_rule", streams=streams, pad=LLAMACPP_PAD, n_ubatch=n_ubatch, name=_GGML_NAMES[dtype]
        )
    return EngineFigure("llama.cpp", None if total is None else streams * total, rule, LLAMACPP_SOURCE)


def hf_rule_bytes(cfg: KVConfig, batch: int, seq_len: int, dtype: str) -> int:
    """transformers' ``DynamicCache`` by its rule, for a config its modeling code cannot be measured from: every
    token of full and MLA layers, the last ``sliding_window - 1`` of sliding ones, nothing for linear ones."""

    def tokens(kind: str) -> int:
        if kind == "linear":
            return 0
        return len(range(seq_len)[-cfg.window + 1 :]) if kind == "sliding" else seq_len

    return batch * _sum_layers(cfg, tokens, lambda kind: layer_token_bytes(cfg, kind, dtype))


def _hf(cfg: KVConfig, batch: int, seq_len: int, dtype: str):
    if dtype not in HF_DTYPES:
        rule = msg("kv_memory.hf_no_dtype", dtype=dtype)
        return EngineFigure("transformers DynamicCache", None, rule, HF_SOURCE)
    measured = measured_hf_bytes(cfg, batch, seq_len, dtype)
    if measured is None:
        return EngineFigure(
            "transformers DynamicCache", hf_rule_bytes(cfg, batch, seq_len, dtype), msg("kv_memory.hf_rule"), HF_SOURCE
        )
    # where it differs from the minimum, attnviz.labs.kv.agreement says why, beside both figures
    return EngineFigure("transformers DynamicCache", measured, msg("kv_memory.hf_measured"), HF_SOURCE)


def falcon_broadcast(cfg: KVConfig) -> bool:
    """Falcon's new decoder architecture broadcasts K and V to every query head before they are cached."""
    raw = json.loads(cfg.raw_json) if cfg.raw_json else {}
    return str(cfg.model_type).lower() == "falcon" and bool(raw.get("new_decoder_architecture"))


def measured_hf_bytes(cfg: KVConfig, batch: int, seq_len: int, dtype: str) -> int | None:
    """What transformers' own cache holds after a prefill of (batch, seq_len), measured from the architecture's
    modeling code (:func:`attnviz.models.registry.transformers_cache_elements`); None for an unknown model type or
    code that does not run on the meta device."""
    if cfg.raw_json is None:
        return None
    sliding = tuple(cfg.window - 1 if kind == "sliding" else None for kind in cfg.layer_kinds)
    elements = transformers_cache_elements(json.loads(cfg.raw_json), batch, seq_len, sliding)
    return None if elements is None else int(elements * bytes_per_element(dtype))


def engine_estimates(
    cfg: KVConfig,
    batch: int,
    seq_len: int,
    dtype: str = "bf16",
    *,
    vllm_block_size: int = settings.KV_VLLM_BLOCK_SIZE,
    vllm_max_num_batched_tokens: int = settings.KV_VLLM_MAX_NUM_BATCHED_TOKENS,
    vllm_hybrid_allocator: bool = True,
    llamacpp_n_ubatch: int = settings.KV_LLAMACPP_N_UBATCH,
    llamacpp_n_seq: int | None = None,
) -> list[EngineFigure]:
    """What vLLM, llama.cpp and transformers' DynamicCache allocate for the same batch, each with its rule.

    vLLM (vllm/v1/kv_cache_interface.py, ``SlidingWindowSpec.max_memory_usage_bytes``): paged blocks; a sliding
    layer budgets ``cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block) + 1`` blocks (the +1
    because the window need not start on a block boundary), full length with the hybrid allocator off.
    llama.cpp (src/llama-kv-cache-iswa.cpp, commit 02c28f5): ``size_swa = GGML_PAD(min(size_base, n_swa *
    n_seq + n_ubatch), 256)`` for a unified cache; with one stream per sequence (the default) n_seq is 1 per
    stream, which is what is modelled. The issue's older ``PAD(n_swa·n_seq + n_batch + 1, 32)`` is not what the
    current file says. transformers (the installed 5.x ``cache_utils.py``): ``DynamicSlidingWindowLayer`` keeps
    the last ``sliding_window - 1`` tokens.
    """
    check_dtype(dtype)
    check_count(batch, "batch", settings.KV_MAX_BATCH)
    check_count(seq_len, "seq_len", settings.KV_MAX_SEQ_LEN)
    check_count(vllm_block_size, "vllm_block_size", settings.KV_MAX_SEQ_LEN)
    check_count(vllm_max_num_batched_tokens, "vllm_max_num_batched_tokens", settings.KV_MAX_SEQ_LEN)
    check_count(llamacpp_n_ubatch, "llamacpp_n_ubatch", settings.KV_MAX_SEQ_LEN)
    n_seq = batch if llamacpp_n_seq is None else check_count(llamacpp_n_seq, "llamacpp_n_seq", settings.KV_MAX_BATCH)
    return [
        _vllm(cfg, batch, seq_len, dtype, vllm_block_size, vllm_max_num_batched_tokens, vllm_hybrid_allocator),
        _llamacpp(cfg, batch, seq_len, dtype, llamacpp_n_ubatch, n_seq),
        _hf(cfg, batch, seq_len, dtype),
    ]

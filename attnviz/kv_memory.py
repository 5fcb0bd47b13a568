"""Exact KV-cache memory: what a model's cache holds for a batch of sequences, from its config.json.

Pure functions, no Streamlit. The cache of one attention layer holds, per token, a key and a value row of
``head_dim`` values for each of ``n_kv_head`` heads, so ``2 x n_kv_head x head_dim`` values (K and V are
``(batch, n_kv_head, k_len, head_dim)``). Multi-head latent attention (MLA, DeepSeek-V2/V3) caches one latent row
of ``kv_lora_rank + qk_rope_head_dim`` values per token and layer instead: no head count, no factor 2. A sliding
layer holds at most ``window`` tokens; a linear-attention or Mamba layer keeps a fixed-size recurrent state, which
is NOT KV cache and is not counted here (it does not grow with the sequence).

:func:`estimate` is the theoretical minimum. :func:`engine_estimates` applies what vLLM, llama.cpp and
transformers' ``DynamicCache`` actually allocate, each rule with the source it comes from.

An encoder (BERT, MiniLM) has no KV cache at inference: it reads the whole text at once. Its figures say what a
cache would hold if the same layers were run as a decoder; the attention kind is still "mha".

Quantised caches count their scales. A row of ``head_dim`` values (one head's key or value of one token in one
layer; the MLA latent row for MLA) is cut into ``ceil(head_dim / group_size)`` groups, as llama.cpp quantises
K/V rows in blocks of 32 along head_dim; each group stores its scale (fp16, 2 bytes), and int8 / int4 also a
zero point (fp16, 2 bytes). So with groups of 32: fp8 is 1 + 2/32 = 1.0625 bytes per value (the size of ggml's
q8_0 block, 34 bytes per 32), int8 1 + 4/32 = 1.125 and int4 0.5 + 4/32 = 0.625 (ggml's q4_1, 20 bytes per 32).
Totals are whole bytes: each row's payload is rounded up to a byte and its groups to whole groups.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from attnviz import settings
from attnviz.i18n import t

KV_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4")
LAYER_KINDS = ("full", "sliding", "linear", "mla")

# bits of one stored value, and whether each group also stores a zero point next to its scale
_PAYLOAD_BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}
_HAS_SCALE = {"fp8": False, "int8": True, "int4": True}  # value: has a zero point too; absent: unquantised
SCALE_BYTES = 2  # fp16 scale per group
ZERO_BYTES = 2  # fp16 zero point per group (int8, int4)

# transformers' layer_types names, and the other spellings hybrid models use
_KIND_OF_LAYER_TYPE = {
    "full_attention": "full",
    "attention": "full",
    "global": "full",
    "sliding_attention": "sliding",
    "local": "sliding",
    "chunked_attention": "sliding",
    "linear_attention": "linear",
    "mamba": "linear",
    "mamba2": "linear",
    "conv": "linear",
    "recurrent": "linear",
}
# families whose MLP is two matrices (up, down); every other family is gated (gate, up, down)
_UNGATED_MLP = {
    "gpt2", "bert", "roberta", "distilbert", "falcon", "gpt_neox", "opt", "gptj", "phi", "gpt_bigcode",
    "bloom", "starcoder2", "mpt", "refinedweb", "refinedwebmodel",
}  # fmt: skip
_LEARNED_POSITIONS = {"gpt2", "bert", "roberta", "distilbert", "opt", "gpt_bigcode"}
_FALCON = {"falcon", "refinedweb", "refinedwebmodel"}

_LAYER_NAMES = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
_HEAD_NAMES = ("num_attention_heads", "n_head", "num_heads", "n_heads")
_HIDDEN_NAMES = ("hidden_size", "n_embd", "d_model", "dim")
_POSITION_NAMES = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "n_ctx")


class ConfigError(ValueError):
    """A config that cannot be read or used; the one-line message names the missing or bad field."""


@dataclass(frozen=True)
class KVConfig:
    """What decides a model's KV cache. ``n_kv_head`` is 1 for MQA; for MLA it is the attention head count.

    ``n_params`` estimates the weight count from matrix shapes: embeddings (plus learned position embeddings),
    per layer the attention projections and the MLP (all experts, shared experts and the router for a MoE), and
    the LM head unless tied. Norms and biases are left out (under 0.1%). None when the config does not say
    enough (no vocab or MLP size, linear-attention layers, MoE layouts other than every layer / first-k-dense).
    """

    name: str
    n_layer: int
    n_head: int
    n_kv_head: int
    head_dim: int
    hidden_size: int
    layer_kinds: tuple[str, ...]
    window: int | None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    max_positions: int | None = None
    vocab_size: int | None = None
    intermediate_size: int | None = None
    model_type: str | None = None
    torch_dtype: str | None = None
    n_params: int | None = None
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_head", "n_kv_head", "head_dim", "hidden_size"):
            _check_positive(getattr(self, name), name)
        if self.n_layer > settings.KV_MAX_LAYERS:
            raise ConfigError(t("kv_memory.n_layer_over", n_layer=self.n_layer, most=settings.KV_MAX_LAYERS))
        if len(self.layer_kinds) != self.n_layer:
            raise ConfigError(t("kv_memory.kinds_count", n=len(self.layer_kinds), n_layer=self.n_layer))
        bad = sorted(set(self.layer_kinds) - set(LAYER_KINDS))
        if bad:
            raise ConfigError(t("kv_memory.unknown_kind", kind=repr(bad[0]), kinds=", ".join(LAYER_KINDS)))
        if "mla" not in self.layer_kinds and self.n_head % self.n_kv_head:
            raise ConfigError(t("kv_memory.n_head_multiple", n_head=self.n_head, n_kv_head=self.n_kv_head))
        if "sliding" in self.layer_kinds:
            _check_positive(self.window, "window (sliding_window)")
        if "mla" in self.layer_kinds:
            _check_positive(self.kv_lora_rank, "kv_lora_rank")
            _check_positive(self.qk_rope_head_dim, "qk_rope_head_dim")

    @property
    def attention(self) -> str:
        """ "mla" when any layer caches a latent, else "mqa" (one KV head), "mha" (one per query head) or "gqa"."""
        if "mla" in self.layer_kinds:
            return "mla"
        if self.n_kv_head == 1 and self.n_head > 1:
            return "mqa"
        return "mha" if self.n_kv_head == self.n_head else "gqa"

    def row_values(self, kind: str) -> tuple[int, int]:
        """(rows, values per row) one token leaves in one layer of ``kind``: K and V rows per head, or one latent."""
        if kind == "mla":
            return 1, self.kv_lora_rank + self.qk_rope_head_dim
        if kind == "linear":
            return 0, 0
        return 2 * self.n_kv_head, self.head_dim


@dataclass(frozen=True)
class KVEstimate:
    per_layer: list[int]  # bytes of each layer for the whole batch x seq_len, windows and blocks applied
    total_bytes: int
    bytes_per_token: int  # all layers, one token, no window applied
    per_kind: dict[str, int]  # total bytes per layer kind
    tokens_per_layer: list[int]  # tokens each layer holds per sequence


@dataclass(frozen=True)
class EngineFigure:
    engine: str
    total_bytes: int | None  # None: the engine cannot store this cache dtype (the rule says why)
    rule: str
    source: str


def _check_positive(value: Any, name: str) -> int:
    if value is None:
        raise ConfigError(t("kv_memory.no_field", name=name))
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(t("kv_memory.not_whole", name=name, value=repr(value)))
    if value <= 0:
        raise ConfigError(t("kv_memory.not_positive", name=name, value=value))
    return value


# ---------------------------------------------------------------------------------------------------------------
# bytes per value


def _check_dtype(dtype: str) -> None:
    if dtype not in KV_DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(KV_DTYPES)}")


def bytes_per_element(dtype: str, group_size: int = settings.KV_GROUP_SIZE) -> Fraction:
    """Exact bytes per cached value when rows fill whole groups: fp32 4, bf16/fp16 2, fp8 1 + 2/group_size,
    int8 1 + 4/group_size, int4 1/2 + 4/group_size (fp16 scale per group, plus an fp16 zero point for int8/int4).
    """
    _check_dtype(dtype)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size <= 0:
        raise ValueError(f"group_size must be a positive whole number, got {group_size!r}")
    payload = Fraction(_PAYLOAD_BITS[dtype], 8)
    if dtype not in _HAS_SCALE:
        return payload
    per_group = SCALE_BYTES + (ZERO_BYTES if _HAS_SCALE[dtype] else 0)
    return payload + Fraction(per_group, group_size)


def row_bytes(values: int, dtype: str, group_size: int = settings.KV_GROUP_SIZE) -> int:
    """Whole bytes of one cached row of ``values`` values: payload rounded up to a byte, plus each group's scale
    (and zero point); a short last group still stores a full scale."""
    bytes_per_element(dtype, group_size)  # validates both
    if values == 0:
        return 0
    payload = math.ceil(values * _PAYLOAD_BITS[dtype] / 8)
    if dtype not in _HAS_SCALE:
        return payload
    groups = math.ceil(values / group_size)
    return payload + groups * (SCALE_BYTES + (ZERO_BYTES if _HAS_SCALE[dtype] else 0))


def layer_token_bytes(cfg: KVConfig, kind: str, dtype: str = "bf16", group_size: int = settings.KV_GROUP_SIZE) -> int:
    """Bytes one token leaves in one layer of ``kind``."""
    rows, values = cfg.row_values(kind)
    return rows * row_bytes(values, dtype, group_size)


# ---------------------------------------------------------------------------------------------------------------
# estimates


def _check_count(value: Any, name: str, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise ValueError(f"{name} ({value!r}) must be a whole number from 1 to {high:,}")
    return value


def held_tokens(cfg: KVConfig, kind: str, seq_len: int, block_size: int | None = None) -> int:
    """Tokens one sequence keeps in a layer of ``kind``: all of them, the window, or none; rounded up to blocks."""
    if kind == "linear":
        return 0
    held = min(seq_len, cfg.window) if kind == "sliding" else seq_len
    return math.ceil(held / block_size) * block_size if block_size else held


def estimate(
    cfg: KVConfig,
    batch: int = 1,
    seq_len: int = 1,
    dtype: str = "bf16",
    group_size: int = settings.KV_GROUP_SIZE,
    block_size: int | None = None,
) -> KVEstimate:
    """The theoretical minimum cache for ``batch`` sequences of ``seq_len`` tokens.

    Per layer: batch x held tokens x rows x row bytes, where a full or MLA layer holds seq_len tokens, a sliding
    layer min(seq_len, window), a linear layer none, and ``block_size`` rounds each sequence's held tokens up to
    whole blocks (a paged cache).
    """
    _check_count(batch, "batch", settings.KV_MAX_BATCH)
    _check_count(seq_len, "seq_len", settings.KV_MAX_SEQ_LEN)
    if block_size is not None:
        _check_count(block_size, "block_size", settings.KV_MAX_SEQ_LEN)
    token_bytes = {kind: layer_token_bytes(cfg, kind, dtype, group_size) for kind in set(cfg.layer_kinds)}
    tokens = [held_tokens(cfg, kind, seq_len, block_size) for kind in cfg.layer_kinds]
    per_layer = [batch * held * token_bytes[kind] for kind, held in zip(cfg.layer_kinds, tokens, strict=True)]
    per_kind: dict[str, int] = {}
    for kind, size in zip(cfg.layer_kinds, per_layer, strict=True):
        per_kind[kind] = per_kind.get(kind, 0) + size
    return KVEstimate(
        per_layer=per_layer,
        total_bytes=sum(per_layer),
        bytes_per_token=sum(token_bytes[kind] for kind in cfg.layer_kinds),
        per_kind=per_kind,
        tokens_per_layer=tokens,
    )


# ---------------------------------------------------------------------------------------------------------------
# what engines allocate

VLLM_SOURCE = "https://github.com/vllm-project/vllm/blob/main/vllm/v1/kv_cache_interface.py"  # SlidingWindowSpec
LLAMACPP_SOURCE = "https://github.com/ggml-org/llama.cpp/blob/master/src/llama-kv-cache-iswa.cpp"
HF_SOURCE = "https://github.com/huggingface/transformers/blob/main/src/transformers/cache_utils.py"
LLAMACPP_PAD = 256  # llama-kv-cache-iswa.cpp: "the SWA cache is always padded to 256"; n_ctx is padded alike
# ggml block sizes (bytes, values) for the cache types our dtypes map to; fp8 has no ggml cache type
_GGML_BLOCKS = {"fp32": (4, 1), "fp16": (2, 1), "bf16": (2, 1), "int8": (34, 32), "int4": (20, 32)}
_GGML_NAMES = {"fp32": "f32", "fp16": "f16", "bf16": "bf16", "int8": "q8_0", "int4": "q4_1"}


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
        rule = t("kv_memory.vllm_no_dtype", dtype=dtype)
    else:
        sliding = t("kv_memory.vllm_sliding", batched=batched, block=block) if hybrid else t("kv_memory.vllm_no_hybrid")
        rule = t("kv_memory.vllm_rule", block=block, sliding=sliding)
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
            t("kv_memory.llamacpp_no_dtype", dtype=dtype)
            if block is None
            else t("kv_memory.llamacpp_blocks", name=_GGML_NAMES[dtype], size=block[1])
        )
    else:
        rule = t(
            "kv_memory.llamacpp_rule", streams=streams, pad=LLAMACPP_PAD, n_ubatch=n_ubatch, name=_GGML_NAMES[dtype]
        )
    return EngineFigure("llama.cpp", None if total is None else streams * total, rule, LLAMACPP_SOURCE)


def _hf(cfg: KVConfig, batch: int, seq_len: int, dtype: str):
    if dtype not in ("fp32", "bf16", "fp16"):
        rule = t("kv_memory.hf_no_dtype", dtype=dtype)
        return EngineFigure("transformers DynamicCache", None, rule, HF_SOURCE)

    def tokens(kind: str) -> int:
        if kind == "linear":
            return 0
        return min(seq_len, cfg.window - 1) if kind == "sliding" else seq_len

    total = _sum_layers(cfg, tokens, lambda kind: layer_token_bytes(cfg, kind, dtype))
    rule = t("kv_memory.hf_rule")
    return EngineFigure("transformers DynamicCache", batch * total, rule, HF_SOURCE)


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
    _check_dtype(dtype)
    _check_count(batch, "batch", settings.KV_MAX_BATCH)
    _check_count(seq_len, "seq_len", settings.KV_MAX_SEQ_LEN)
    _check_count(vllm_block_size, "vllm_block_size", settings.KV_MAX_SEQ_LEN)
    _check_count(vllm_max_num_batched_tokens, "vllm_max_num_batched_tokens", settings.KV_MAX_SEQ_LEN)
    _check_count(llamacpp_n_ubatch, "llamacpp_n_ubatch", settings.KV_MAX_SEQ_LEN)
    n_seq = batch if llamacpp_n_seq is None else _check_count(llamacpp_n_seq, "llamacpp_n_seq", settings.KV_MAX_BATCH)
    return [
        _vllm(cfg, batch, seq_len, dtype, vllm_block_size, vllm_max_num_batched_tokens, vllm_hybrid_allocator),
        _llamacpp(cfg, batch, seq_len, dtype, llamacpp_n_ubatch, n_seq),
        _hf(cfg, batch, seq_len, dtype),
    ]


# ---------------------------------------------------------------------------------------------------------------
# weights and what fits


def weight_bytes(cfg: KVConfig, dtype: str = "bf16", group_size: int = settings.KV_GROUP_SIZE) -> int | None:
    """n_params x bytes per weight (quantised weights count their group scales as the cache does); None unknown."""
    if cfg.n_params is None:
        return None
    return math.ceil(cfg.n_params * bytes_per_element(dtype, group_size))


def max_fit(
    cfg: KVConfig,
    gpu_bytes: int,
    dtype: str = "bf16",
    weights_dtype: str = "bf16",
    *,
    seq_len: int = settings.KV_DEFAULT_SEQ_LEN,
    group_size: int = settings.KV_GROUP_SIZE,
    block_size: int | None = None,
) -> dict:
    """The largest batch of ``seq_len``-token sequences, and the longest single sequence, whose minimum cache fits
    in ``gpu_bytes`` minus the weights (n_params x weight bytes). Activations, the CUDA context and allocator slack
    are not subtracted, so real limits are lower. The longest sequence is searched up to ``max_positions`` (or
    KV_MAX_SEQ_LEN when the config gives none): ``seq_len_capped`` says the cap, not memory, stopped it.
    ``weight_bytes`` None (unknown parameter count) leaves the whole memory to the cache.
    """
    _check_count(gpu_bytes, "gpu_bytes", 2**62)
    weights = weight_bytes(cfg, weights_dtype, group_size)
    free = gpu_bytes - (weights or 0)
    per_sequence = estimate(cfg, 1, seq_len, dtype, group_size, block_size).total_bytes
    max_batch = 0 if free <= 0 else (settings.KV_MAX_BATCH if per_sequence == 0 else free // per_sequence)
    limit = min(cfg.max_positions or settings.KV_MAX_SEQ_LEN, settings.KV_MAX_SEQ_LEN)

    def fits(n: int) -> bool:
        return free > 0 and estimate(cfg, 1, n, dtype, group_size, block_size).total_bytes <= free

    low, high = 0, limit  # fits(low) or low == 0; the cache never shrinks as the sequence grows
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return {
        "gpu_bytes": gpu_bytes,
        "weight_bytes": weights,
        "free_bytes": free,
        "seq_len": seq_len,
        "max_batch": min(max_batch, settings.KV_MAX_BATCH),
        "max_seq_len": low,
        "seq_len_capped": low == limit,
    }


def variants(cfg: KVConfig) -> dict[str, KVConfig]:
    """The same model as MHA, GQA, MQA and MLA, for a comparison chart.

    MHA: n_kv_head = n_head. GQA: as configured when it is GQA, else the largest divisor of n_head that is at
    most max(2, n_head // 8) (Llama-3's 32 -> 8 ratio); left out when n_head has no divisor between 1 and itself.
    MQA: one KV head. MLA: as configured, else DeepSeek-V2's choice d_c = 4 x head_dim and rope dim =
    head_dim / 2 (512 and 64 for head_dim 128). Sliding and linear layers keep their kinds; MLA layers become
    full layers in the non-MLA variants.
    """
    kinds = tuple("full" if kind == "mla" else kind for kind in cfg.layer_kinds)
    base = replace(cfg, layer_kinds=kinds, kv_lora_rank=None, qk_rope_head_dim=None, notes=())
    out = {"mha": replace(base, n_kv_head=cfg.n_head)}
    if cfg.attention == "gqa":
        out["gqa"] = replace(base, n_kv_head=cfg.n_kv_head)
    else:
        bound = max(2, cfg.n_head // 8)
        divisors = [d for d in range(2, min(bound, cfg.n_head - 1) + 1) if cfg.n_head % d == 0]
        if divisors:
            out["gqa"] = replace(base, n_kv_head=divisors[-1])
    out["mqa"] = replace(base, n_kv_head=1)
    if cfg.attention == "mla":
        out["mla"] = cfg
    else:
        mla_kinds = tuple("mla" if kind == "full" else kind for kind in kinds)
        out["mla"] = replace(
            base,
            layer_kinds=mla_kinds,
            kv_lora_rank=4 * cfg.head_dim,
            qk_rope_head_dim=max(1, cfg.head_dim // 2),
            n_kv_head=cfg.n_head,
        )
    return out


# ---------------------------------------------------------------------------------------------------------------
# reading configs


def _first(raw: dict, names: tuple[str, ...]) -> tuple[str | None, Any]:
    for name in names:
        if raw.get(name) is not None:
            return name, raw[name]
    return None, None


def _required(raw: dict, names: tuple[str, ...]) -> int:
    key, value = _first(raw, names)
    if key is None:
        others = t("kv_memory.or_names", names=", ".join(names[1:])) if len(names) > 1 else ""
        raise ConfigError(t("kv_memory.missing", name=names[0], others=others))
    return _check_positive(value, key)


def _optional_positive(raw: dict, names: tuple[str, ...]) -> int | None:
    key, value = _first(raw, names)
    return None if key is None else _check_positive(value, key)


def _transformers_config(model_type: str | None, section: dict) -> tuple[Any, str | None]:
    """transformers' config object for a known model_type (its computed defaults), or (None, why not)."""
    if not model_type:
        return None, t("kv_memory.no_model_type")
    try:
        from transformers import AutoConfig
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - transformers is a dependency
        return None, t("kv_memory.no_transformers")
    keep = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        kwargs = {k: v for k, v in section.items() if k != "model_type"}
        return AutoConfig.for_model(model_type, **kwargs), None
    except Exception as err:  # a third-party reader and validator; the raw reading still applies
        if isinstance(err, ValueError) and "Unrecognized model" in str(err):
            return None, t("kv_memory.unknown_model_type", model_type=repr(model_type))
        return None, t("kv_memory.rejected", error=_one_line(err))
    finally:
        hf_logging.set_verbosity(keep)


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text if len(text) <= 160 else text[:157] + "..."


def _attr(hf: Any, raw: dict, name: str, default: Any = None) -> Any:
    """transformers' value when it knows the model, else the file's."""
    if hf is not None:
        return getattr(hf, name, raw.get(name, default))
    return raw.get(name, default)


def _kv_heads(hf: Any, section: dict, model_type: str, n_head: int) -> int:
    """KV heads: num_key_value_heads; Falcon's num_kv_heads (new decoder) or multi_query; absent -> MHA."""
    if model_type in _FALCON or "new_decoder_architecture" in section:
        if _attr(hf, section, "new_decoder_architecture", False):
            return _required(section, ("num_kv_heads", "num_key_value_heads", "n_head_kv"))
        return 1 if _attr(hf, section, "multi_query", False) else n_head
    key, value = _first(section, ("num_key_value_heads", "num_kv_heads", "n_head_kv", "n_kv_heads"))
    if key is not None:
        return _check_positive(value, key)
    if section.get("multi_query"):  # GPT-BigCode / StarCoder
        return 1
    if section.get("multi_query_attention") and section.get("multi_query_group_num") is not None:  # ChatGLM
        return _check_positive(section["multi_query_group_num"], "multi_query_group_num")
    return n_head


def _layer_kinds(hf: Any, section: dict, model_type: str, n_layer: int) -> tuple[tuple[str, ...], int | None, list]:
    """Each layer's kind and the sliding window, as transformers reads the config (or the raw rules)."""
    notes = []
    window = _attr(hf, section, "sliding_window")
    if section.get("use_sliding_window") is False:  # Qwen2: a sliding_window in the file but switched off
        window = None
    types = _attr(hf, section, "layer_types")
    chunk = section.get("attention_chunk_size")
    if types is None and hf is None:
        interval, pattern = section.get("full_attention_interval"), section.get("sliding_window_pattern")
        if interval:
            _check_positive(interval, "full_attention_interval")
            types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n_layer)]
        elif pattern and window is not None:
            _check_positive(pattern, "sliding_window_pattern")
            types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n_layer)]
        elif model_type == "gemma2" and window is not None:
            types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layer)]
    if types is None:  # transformers' get_layer_types_and_kwargs: a window means every layer slides
        types = ["sliding_attention" if window is not None else "full_attention"] * n_layer
    if not isinstance(types, list | tuple) or len(types) != n_layer:
        raise ConfigError(t("kv_memory.layer_types_count", n_layer=n_layer))
    kinds = []
    for layer_type in types:
        kind = _KIND_OF_LAYER_TYPE.get(str(layer_type).lower())
        if kind is None:
            raise ConfigError(t("kv_memory.layer_types_unknown", kind=repr(str(layer_type)[:40])))
        kinds.append(kind)
    if "chunked_attention" in types and window is None:
        window = chunk
        notes.append(t("kv_memory.chunked"))
    if "sliding" not in kinds:
        window = None
    elif window is None:
        raise ConfigError(t("kv_memory.no_window"))
    else:
        window = _check_positive(window, "sliding_window")
    return tuple(kinds), window, notes


def _count_params(c: dict) -> int | None:
    """Weight matrices from the config (see KVConfig.n_params); None when the config does not say enough."""
    hidden, vocab, inter = c["hidden"], c["vocab"], c["inter"]
    if vocab is None or "linear" in c["kinds"]:
        return None
    total = vocab * hidden * (1 if c["tied"] else 2)
    if c["model_type"] in _LEARNED_POSITIONS and c["positions"]:
        total += c["positions"] * hidden + (c["type_vocab"] or 0) * hidden
    heads, kv, hd = c["n_head"], c["n_kv"], c["head_dim"]
    gate = 2 if c["model_type"] in _UNGATED_MLP else 3
    experts, moe_inter = c["experts"], c["moe_inter"] or inter
    if experts and (moe_inter is None or c["sparse_step"] not in (None, 1) or c["mlp_only"]):
        return None
    for index, kind in enumerate(c["kinds"]):
        if kind == "mla":
            nope, rope, v_dim, q_rank, rank = c["nope"], c["rope"], c["v_dim"], c["q_rank"], c["rank"]
            if nope is None or v_dim is None:
                return None
            q = hidden * heads * (nope + rope) if not q_rank else hidden * q_rank + q_rank * heads * (nope + rope)
            total += q + hidden * (rank + rope) + rank * heads * (nope + v_dim) + heads * v_dim * hidden
        else:
            total += hidden * heads * hd + 2 * hidden * kv * hd + heads * hd * hidden
        if experts and index >= c["dense_first"]:
            total += experts * 3 * hidden * moe_inter + hidden * experts + c["shared"]
        elif inter is None:
            return None
        else:
            total += gate * hidden * inter
    return total


def config_from_dict(raw: dict, name: str = "config") -> KVConfig:
    """A :class:`KVConfig` from a config.json's contents; ConfigError naming the field when it cannot be used.

    transformers reads the file when it knows its ``model_type`` (``AutoConfig.for_model``), so defaults such as
    ``head_dim``, ``num_key_value_heads`` and ``layer_types`` come out as the model computes them; unknown types
    are read as written. The layer count, head count and hidden size (or head_dim) must be in the file: those
    are never taken from transformers' class defaults. Multimodal configs are read from ``text_config``.
    """
    if not isinstance(raw, dict):
        raise ConfigError(t("kv_memory.not_object", name=name))
    section = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    model_type = section.get("model_type") or (raw.get("model_type") if section is raw else None)
    model_type = str(model_type) if model_type else None
    n_layer = _required(section, _LAYER_NAMES)
    n_head = _required(section, _HEAD_NAMES)
    if n_layer > settings.KV_MAX_LAYERS:
        raise ConfigError(t("kv_memory.layers_over", n_layer=n_layer, most=settings.KV_MAX_LAYERS))
    explicit_head_dim = _optional_positive(section, ("head_dim", "kv_channels"))
    hidden = _optional_positive(section, _HIDDEN_NAMES)
    if hidden is None and explicit_head_dim is None:
        raise ConfigError(t("kv_memory.no_hidden"))
    for key in ("num_key_value_heads", "num_kv_heads", "sliding_window", "kv_lora_rank", "qk_rope_head_dim"):
        if section.get(key) is not None:
            _check_positive(section[key], key)
    hf, why = _transformers_config(model_type, section)
    notes = [why] if why else []
    mtype = (model_type or "").lower()

    rank = _attr(hf, section, "kv_lora_rank")
    rope = _attr(hf, section, "qk_rope_head_dim") if rank is not None else None
    nope, v_dim = section.get("qk_nope_head_dim"), section.get("v_head_dim")
    if hf is not None and rank is not None:
        nope, v_dim = getattr(hf, "qk_nope_head_dim", nope), getattr(hf, "v_head_dim", v_dim)
    if rank is not None:
        rank = _check_positive(rank, "kv_lora_rank")
        rope = _check_positive(rope, "qk_rope_head_dim")
        head_dim = (nope + rope) if nope else (explicit_head_dim or v_dim)  # the per-head q.k size
        n_kv = n_head
    else:
        head_dim = explicit_head_dim or (getattr(hf, "head_dim", None) if hf is not None else None)
        if head_dim is None:
            if hidden % n_head:
                raise ConfigError(t("kv_memory.hidden_multiple", hidden=hidden, n_head=n_head))
            head_dim = hidden // n_head
        n_kv = _kv_heads(hf, section, mtype, n_head)
        if n_kv > n_head or n_head % n_kv:
            raise ConfigError(t("kv_memory.heads_multiple", n_head=n_head, n_kv=n_kv))
    head_dim = _check_positive(head_dim, "head_dim")
    hidden = hidden or n_head * head_dim
    kinds, window, kind_notes = _layer_kinds(hf, section, mtype, n_layer)
    notes += kind_notes
    if rank is not None:
        kinds = tuple("mla" if kind == "full" else kind for kind in kinds)

    positions = _optional_positive(section, _POSITION_NAMES)
    vocab = _optional_positive(section, ("vocab_size", "padded_vocab_size"))
    inter = _optional_positive(section, ("intermediate_size", "n_inner", "ffn_hidden_size", "ffn_dim"))
    if inter is None and mtype in _UNGATED_MLP:
        inter = 4 * hidden  # GPT-2's n_inner: null and Falcon's ffn_hidden_size default
    tied = _attr(hf, section, "tie_word_embeddings", True)
    shared_inter = section.get("shared_expert_intermediate_size")
    moe_inter = section.get("moe_intermediate_size")
    n_shared = section.get("n_shared_experts") or 0
    shared = 3 * hidden * (n_shared * (moe_inter or 0) + (shared_inter or 0)) + (hidden if shared_inter else 0)
    dtype = section.get("torch_dtype") or section.get("dtype") or raw.get("torch_dtype") or raw.get("dtype")
    params = _count_params(
        {
            "hidden": hidden, "vocab": vocab, "inter": inter, "kinds": kinds, "tied": bool(tied),
            "model_type": mtype, "positions": positions, "type_vocab": section.get("type_vocab_size"),
            "n_head": n_head, "n_kv": n_kv, "head_dim": head_dim, "nope": nope, "rope": rope, "v_dim": v_dim,
            "q_rank": section.get("q_lora_rank"), "rank": rank,
            "experts": section.get("n_routed_experts") or section.get("num_local_experts") or section.get("num_experts"),
            "moe_inter": moe_inter, "sparse_step": section.get("decoder_sparse_step"),
            "mlp_only": section.get("mlp_only_layers"), "dense_first": section.get("first_k_dense_replace") or 0,
            "shared": shared,
        }
    )  # fmt: skip
    return KVConfig(
        name=name,
        n_layer=n_layer,
        n_head=n_head,
        n_kv_head=n_kv,
        head_dim=head_dim,
        hidden_size=hidden,
        layer_kinds=kinds,
        window=window,
        kv_lora_rank=rank,
        qk_rope_head_dim=rope,
        max_positions=positions,
        vocab_size=vocab,
        intermediate_size=inter,
        model_type=model_type,
        torch_dtype=str(dtype) if dtype else None,
        n_params=params,
        notes=tuple(notes),
    )


def read_config_file(path: Path) -> dict:
    """A config.json's object, size-checked before it is read; ConfigError for anything else."""
    try:
        size = path.stat().st_size
    except OSError as err:
        raise ConfigError(t("kv_memory.cannot_read", name=path, error=err.strerror or err)) from err
    if size > settings.KV_CONFIG_MAX_BYTES:
        raise ConfigError(t("kv_memory.too_large", name=path, size=size, most=settings.KV_CONFIG_MAX_BYTES))
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ConfigError(t("kv_memory.cannot_read", name=path, error=_one_line(err))) from err
    return parse_config_json(data, str(path))


def parse_config_json(data: bytes | str, name: str) -> dict:
    """An uploaded or pasted config.json's object; ConfigError when it is too large, not JSON or not an object."""
    size = len(data.encode("utf-8") if isinstance(data, str) else data)
    if size > settings.KV_CONFIG_MAX_BYTES:
        raise ConfigError(t("kv_memory.too_large", name=name, size=size, most=settings.KV_CONFIG_MAX_BYTES))
    try:
        text = data if isinstance(data, str) else data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(t("kv_memory.cannot_read", name=name, error=_one_line(err))) from err
    try:
        raw = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as err:
        raise ConfigError(t("kv_memory.not_json", name=name, error=_one_line(err))) from err
    if not isinstance(raw, dict):
        raise ConfigError(t("kv_memory.json_type", name=name, type=type(raw).__name__))
    return raw


def _bundled_config(key: str) -> dict:
    """A bundled model's config: MiniLM's config.json; SmolLM2's converted config.json, or its GGUF header when
    it has not been converted yet (no 20 s conversion just to read a config)."""
    from attnviz import bundled
    from attnviz.source import ModelUnavailableError

    try:
        if key == "minilm":
            return read_config_file(bundled.minilm_dir() / "config.json")
        gguf = bundled.smollm2_gguf()
        folder = bundled.converted_dir(gguf)
        if bundled.is_converted(folder):
            return read_config_file(folder / "config.json")
        from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

        with contextlib.redirect_stdout(None):
            return dict(load_gguf_checkpoint(str(gguf), return_tensors=False)["config"])
    except ModelUnavailableError as err:
        raise ConfigError(str(err)) from err


def load_config(path_or_name: str) -> KVConfig:
    """A config.json path, a model folder (its config.json), or a bundled model: "minilm" or "smollm2"."""
    from attnviz.bundled import BUNDLED

    if path_or_name in BUNDLED and not Path(path_or_name).exists():
        return config_from_dict(_bundled_config(path_or_name), name=path_or_name)
    path = Path(path_or_name)
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise ConfigError(t("kv_memory.no_config_json", path=path_or_name))
    elif not path.exists():
        raise ConfigError(t("kv_memory.not_a_file", path=path_or_name))
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.name
    return config_from_dict(read_config_file(path), name=name)


def kv_config_of(source: Any) -> KVConfig:
    """An attnviz AttentionSource's cache shape: every layer full attention (the embedded model has no windows)."""
    return KVConfig(
        name=str(source.name),
        n_layer=source.n_layer,
        n_head=source.n_head,
        n_kv_head=source.n_kv_head,
        head_dim=source.head_dim,
        hidden_size=source.d_model,
        layer_kinds=("full",) * source.n_layer,
        window=None,
        max_positions=getattr(source, "max_positions", None),
    )


def kind_counts(cfg: KVConfig) -> dict[str, int]:
    """How many layers of each kind, in LAYER_KINDS order."""
    counts = Counter(cfg.layer_kinds)
    return {kind: counts[kind] for kind in LAYER_KINDS if counts[kind]}


def memory_curve(
    cfg: KVConfig,
    lengths: Sequence[int],
    batch: int = 1,
    dtype: str = "bf16",
    group_size: int = settings.KV_GROUP_SIZE,
    block_size: int | None = None,
) -> list[int]:
    """The cache's total bytes at each sequence length (a sliding window shows as a plateau)."""
    return [estimate(cfg, batch, n, dtype, group_size, block_size).total_bytes for n in lengths]


def curve_lengths(longest: int, shortest: int = 128) -> list[int]:
    """Powers of two from ``shortest`` up to ``longest``, and ``longest`` itself: the x axis of a memory curve."""
    lengths = [n for n in (2**e for e in range(40)) if shortest <= n < longest]
    return [*lengths, longest]


def kind_table(cfg: KVConfig, est: KVEstimate, dtype: str, group_size: int = settings.KV_GROUP_SIZE) -> list[dict]:
    """One row per layer kind: how many layers, tokens each holds per sequence, bytes per token per layer, total."""
    rows = []
    for kind, count in kind_counts(cfg).items():
        layers = [i for i, k in enumerate(cfg.layer_kinds) if k == kind]
        rows.append(
            {
                t("kv_memory.col_kind"): kind,
                t("kv_memory.col_layers"): count,
                t("kv_memory.col_tokens"): est.tokens_per_layer[layers[0]],
                t("kv_memory.col_bytes"): layer_token_bytes(cfg, kind, dtype, group_size),
                t("kv_memory.col_total_bytes"): est.per_kind.get(kind, 0),
                t("kv_memory.col_total"): human_bytes(est.per_kind.get(kind, 0)),
            }
        )
    return rows


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB': binary units, three significant figures."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.3g} {unit}"
        n /= 1024
    return f"{n:,.3g} TiB"

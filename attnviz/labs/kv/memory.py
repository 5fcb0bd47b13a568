"""Exact KV-cache memory: what a model's cache holds for a batch of sequences, from its config.json.

Pure functions, no Streamlit. The cache of one attention layer holds, per token, a key and a value row of
``head_dim`` values for each of ``n_kv_head`` heads, so ``2 x n_kv_head x head_dim`` values (K and V are
``(batch, n_kv_head, k_len, head_dim)``). Multi-head latent attention (MLA, DeepSeek-V2/V3) caches one latent row
of ``kv_lora_rank + qk_rope_head_dim`` values per token and layer instead: no head count, no factor 2. A sliding
layer holds at most ``window`` tokens; a linear-attention or Mamba layer keeps a fixed-size recurrent state, which
is NOT KV cache and is not counted here (it does not grow with the sequence).

:func:`estimate` is the theoretical minimum. :func:`attnviz.labs.kv.engines.engine_estimates` applies what vLLM, llama.cpp and
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

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from attnviz import settings
from attnviz.labs.kv.config import KV_DTYPES, LAYER_KINDS, KVConfig

# bits of one stored value, and whether each group also stores a zero point next to its scale
_PAYLOAD_BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}
_HAS_SCALE = {"fp8": False, "int8": True, "int4": True}  # value: has a zero point too; absent: unquantised
SCALE_BYTES = 2  # fp16 scale per group
ZERO_BYTES = 2  # fp16 zero point per group (int8, int4)


@dataclass(frozen=True)
class KVEstimate:
    per_layer: list[int]  # bytes of each layer for the whole batch x seq_len, windows and blocks applied
    total_bytes: int
    bytes_per_token: int  # all layers, one token, no window applied
    per_kind: dict[str, int]  # total bytes per layer kind
    tokens_per_layer: list[int]  # tokens each layer holds per sequence


# bytes per value


def check_dtype(dtype: str) -> None:
    if dtype not in KV_DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(KV_DTYPES)}")


def bytes_per_element(dtype: str, group_size: int = settings.KV_GROUP_SIZE) -> Fraction:
    """Exact bytes per cached value when rows fill whole groups: fp32 4, bf16/fp16 2, fp8 1 + 2/group_size,
    int8 1 + 4/group_size, int4 1/2 + 4/group_size (fp16 scale per group, plus an fp16 zero point for int8/int4).
    """
    check_dtype(dtype)
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


def check_count(value: Any, name: str, high: int) -> int:
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
    check_count(batch, "batch", settings.KV_MAX_BATCH)
    check_count(seq_len, "seq_len", settings.KV_MAX_SEQ_LEN)
    if block_size is not None:
        check_count(block_size, "block_size", settings.KV_MAX_SEQ_LEN)
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
    check_count(gpu_bytes, "gpu_bytes", 2**62)
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


# kind_table's columns, and the catalogue key of each one's header (the app shows them in the reader's language)
KIND_TABLE_HEADERS = {
    "kind": "kv_memory.col_kind",
    "layers": "kv_memory.col_layers",
    "tokens": "kv_memory.col_tokens",
    "bytes": "kv_memory.col_bytes",
    "total_bytes": "kv_memory.col_total_bytes",
    "total": "kv_memory.col_total",
}


def kind_table(cfg: KVConfig, est: KVEstimate, dtype: str, group_size: int = settings.KV_GROUP_SIZE) -> list[dict]:
    """One row per layer kind: how many layers, tokens each holds per sequence, bytes per token per layer, total.

    Keys are those of :data:`KIND_TABLE_HEADERS`.
    """
    rows = []
    for kind, count in kind_counts(cfg).items():
        layers = [i for i, k in enumerate(cfg.layer_kinds) if k == kind]
        rows.append(
            {
                "kind": kind,
                "layers": count,
                "tokens": est.tokens_per_layer[layers[0]],
                "bytes": layer_token_bytes(cfg, kind, dtype, group_size),
                "total_bytes": est.per_kind.get(kind, 0),
                "total": human_bytes(est.per_kind.get(kind, 0)),
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

"""A model's KV-cache shape read from its config.json, as transformers reads it: :class:`KVConfig`.

An explicit ``head_dim`` wins over hidden / heads; no ``num_key_value_heads`` is MHA; Falcon's ``multi_query``
is one KV head; sliding windows, hybrid local/global layers, linear-attention layers and MLA latents are read
from the fields each family uses. A config that lacks a needed field is refused with the field's name
(:class:`~attnviz.errors.ConfigError`), never guessed.
"""

from __future__ import annotations

import contextlib
import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnviz import settings
from attnviz.core.files import kind_of, printable, read_bounded, shown_path
from attnviz.errors import ConfigError, ModelUnavailableError, PathError
from attnviz.i18n.message import Text, carried, msg
from attnviz.models.registry import BUNDLED_CHOICES, bundled_config, oversized_config

KV_DTYPES = settings.KV_DTYPES
LAYER_KINDS = ("full", "sliding", "linear", "mla")

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
    "moe": "linear",  # Nemotron-H's layers_block_type: an MLP or MoE block keeps no KV
    "mlp": "linear",
    "indexed_attention": "full",  # DeepSeek-V3.2's sparse attention: full K/V (or its latent), plus indexer keys
    "heavily_compressed_attention": "full",
    "hybrid": "full",  # a linear-attention block beside a full-attention one in the same layer (Zaya)
    "hybrid_sliding": "sliding",  # ... beside a sliding-window one (Inkling)
}
# families whose MLP is two matrices (up, down); every other family is gated (gate, up, down)
_UNGATED_MLP = {
    "gpt2", "bert", "roberta", "distilbert", "falcon", "gpt_neox", "opt", "gptj", "phi", "gpt_bigcode",
    "bloom", "starcoder2", "mpt", "refinedweb", "refinedwebmodel",
}  # fmt: skip
_LEARNED_POSITIONS = {"gpt2", "bert", "roberta", "distilbert", "opt", "gpt_bigcode"}
_FALCON = {"falcon", "refinedweb", "refinedwebmodel"}

_LAYER_NAMES = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers")
_HEAD_NAMES = ("num_attention_heads", "n_head", "num_heads", "n_heads", "attention_heads", "decoder_attention_heads")
_HIDDEN_NAMES = ("hidden_size", "n_embd", "d_model", "dim")
_POSITION_NAMES = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "n_ctx")


@dataclass(frozen=True)
class KVConfig:
    """What decides a model's KV cache. ``n_kv_head`` is 1 for MQA; for MLA it is the attention head count.

    ``n_params`` estimates the weight count from matrix shapes: embeddings (plus learned position embeddings),
    per layer the attention projections and the MLP (all experts, shared experts and the router for a MoE), and
    the LM head unless tied. Norms and biases are left out (under 0.1%). None when the config does not say
    enough (no vocab or MLP size, linear-attention layers, MoE layouts other than every layer / first-k-dense).
    """

    name: Text | str  # a preset's title is a message; a file or folder name is data
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
    notes: tuple[Text, ...] = field(default=())
    raw_json: str | None = None  # the config's text (a known model_type's): transformers' cache is measured from it

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_head", "n_kv_head", "head_dim", "hidden_size"):
            _check_positive(getattr(self, name), name)
        if self.n_layer > settings.KV_MAX_LAYERS:
            raise ConfigError(msg("kv_memory.n_layer_over", n_layer=self.n_layer, most=settings.KV_MAX_LAYERS))
        if len(self.layer_kinds) != self.n_layer:
            raise ConfigError(msg("kv_memory.kinds_count", n=len(self.layer_kinds), n_layer=self.n_layer))
        bad = sorted(set(self.layer_kinds) - set(LAYER_KINDS))
        if bad:
            raise ConfigError(msg("kv_memory.unknown_kind", kind=repr(bad[0]), kinds=", ".join(LAYER_KINDS)))
        if "mla" not in self.layer_kinds and self.n_head % self.n_kv_head:
            raise ConfigError(msg("kv_memory.n_head_multiple", n_head=self.n_head, n_kv_head=self.n_kv_head))
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


def _whole(value: Any) -> int | None:
    """A field the weight estimate reads (never the cache): a whole number >= 0 as is, anything else (a string, a
    list, a float) None, so that the estimate says it does not know rather than failing on it."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _check_positive(value: Any, name: str) -> int:
    if value is None:
        raise ConfigError(msg("kv_memory.no_field", name=name))
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(msg("kv_memory.not_whole", name=name, value=repr(value)))
    if value <= 0:
        raise ConfigError(msg("kv_memory.not_positive", name=name, value=value))
    return value


# ---------------------------------------------------------------------------------------------------------------
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
        others = msg("kv_memory.or_names", names=", ".join(names[1:])) if len(names) > 1 else ""
        raise ConfigError(msg("kv_memory.missing", name=names[0], others=others))
    return _check_positive(value, key)


def _with_known(section: dict, hf: Any, name: str) -> dict:
    """The section, with transformers' own value of ``name`` where its config class computes the field rather
    than storing it (Nemotron-H counts its layers from ``layers_block_type`` and saves no head count). A field
    the class stores is never filled from its defaults: a file without it is refused, naming it."""
    if hf is None or section.get(name) is not None or name in hf.to_dict():
        return section
    value = getattr(hf, name, None)
    return {**section, name: value} if isinstance(value, int) and not isinstance(value, bool) else section


def _optional_positive(raw: dict, names: tuple[str, ...]) -> int | None:
    key, value = _first(raw, names)
    return None if key is None else _check_positive(value, key)


def _transformers_config(model_type: str | None, section: dict) -> tuple[Any, str | None]:
    """transformers' config object for a known model_type (its computed defaults), or (None, why not)."""
    if not model_type:
        return None, msg("kv_memory.no_model_type")
    try:
        from transformers import AutoConfig
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - transformers is a dependency
        return None, msg("kv_memory.no_transformers")
    keep = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        kwargs = {k: v for k, v in section.items() if k != "model_type"}
        return AutoConfig.for_model(model_type, **kwargs), None
    except Exception as err:  # a third-party reader and validator; the raw reading still applies
        if isinstance(err, ValueError) and "Unrecognized model" in str(err):
            return None, msg("kv_memory.unknown_model_type", model_type=repr(model_type))
        return None, msg("kv_memory.rejected", error=_one_line(err))
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
        if section.get("n_head_kv") is not None:  # Falcon-40B's original RefinedWeb config: grouped K/V heads
            return _check_positive(section["n_head_kv"], "n_head_kv")
        if _attr(hf, section, "new_decoder_architecture", False):
            return _required(section, ("num_kv_heads", "num_key_value_heads", "n_head_kv"))
        return 1 if _attr(hf, section, "multi_query", False) else n_head
    if model_type == "gpt_bigcode" and _attr(hf, section, "multi_query", True):  # StarCoder: multi_query wins
        return 1
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
    if types is None:
        types = _attr(hf, section, "layers_block_type")  # Nemotron-H
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
        raise ConfigError(msg("kv_memory.layer_types_count", n_layer=n_layer))
    kinds = []
    for layer_type in types:
        kind = _KIND_OF_LAYER_TYPE.get(str(layer_type).lower())
        if kind is None:
            raise ConfigError(msg("kv_memory.layer_types_unknown", kind=repr(str(layer_type)[:40])))
        kinds.append(kind)
    if "chunked_attention" in types and window is None:
        window = chunk
        notes.append(msg("kv_memory.chunked"))
    if "sliding" not in kinds:
        window = None
    elif window is None:
        raise ConfigError(msg("kv_memory.no_window"))
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


def config_from_dict(raw: dict, name: Text | str = "config") -> KVConfig:
    """A :class:`KVConfig` from a config.json's contents; ConfigError naming the field when it cannot be used.

    transformers reads the file when it knows its ``model_type`` (``AutoConfig.for_model``), so defaults such as
    ``head_dim``, ``num_key_value_heads`` and ``layer_types`` come out as the model computes them; unknown types
    are read as written. The layer count, head count and hidden size (or head_dim) must be in the file: those
    are never taken from transformers' class defaults. Multimodal configs are read from ``text_config``.
    """
    if not isinstance(raw, dict):
        raise ConfigError(msg("kv_memory.not_object", name=name))
    raw = copy.deepcopy(raw)  # transformers' config classes write into nested dicts (rope_scaling): never the caller's
    section = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    model_type = section.get("model_type") or (raw.get("model_type") if section is raw else None)
    model_type = str(model_type) if model_type else None
    if section.get("sliding_window") == 0 and section.get("use_sliding_window") is False:  # Qwen2-MoE: off
        section = {**section, "sliding_window": None}
    # before transformers reads it: its config classes act on their sizes as they are made
    too_big = oversized_config(raw)
    if too_big is not None:
        raise ConfigError(msg("kv_memory.field_over", field=too_big.field, value=too_big.value, most=too_big.most))
    hf, why = _transformers_config(model_type, section)
    n_layer = _required(_with_known(section, hf, _LAYER_NAMES[0]), _LAYER_NAMES)
    n_head = _required(_with_known(section, hf, _HEAD_NAMES[0]), _HEAD_NAMES)
    if n_layer > settings.KV_MAX_LAYERS:
        raise ConfigError(msg("kv_memory.layers_over", n_layer=n_layer, most=settings.KV_MAX_LAYERS))
    explicit_head_dim = _optional_positive(section, ("head_dim", "kv_channels"))
    hidden = _optional_positive(section, _HIDDEN_NAMES)
    if hidden is None and explicit_head_dim is None:
        raise ConfigError(msg("kv_memory.no_hidden"))
    for key in ("num_key_value_heads", "num_kv_heads", "sliding_window", "kv_lora_rank", "qk_rope_head_dim"):
        if section.get(key) is not None:
            _check_positive(section[key], key)
    notes = [why] if why else []
    mtype = (model_type or "").lower()

    rank = _attr(hf, section, "kv_lora_rank")
    rope = _attr(hf, section, "qk_rope_head_dim") if rank is not None else None
    nope, v_dim = section.get("qk_nope_head_dim"), section.get("v_head_dim")
    if hf is not None and rank is not None:
        nope, v_dim = getattr(hf, "qk_nope_head_dim", nope), getattr(hf, "v_head_dim", v_dim)
    nope, v_dim = _whole(nope), _whole(v_dim)
    if rank is not None:
        rank = _check_positive(rank, "kv_lora_rank")
        rope = _check_positive(rope, "qk_rope_head_dim")
        head_dim = (nope + rope) if nope else (explicit_head_dim or v_dim)  # the per-head q.k size
        n_kv = n_head
    else:
        head_dim = explicit_head_dim or (getattr(hf, "head_dim", None) if hf is not None else None)
        if head_dim is None:
            if hidden % n_head:
                raise ConfigError(msg("kv_memory.hidden_multiple", hidden=hidden, n_head=n_head))
            head_dim = hidden // n_head
        n_kv = _kv_heads(hf, section, mtype, n_head)
        if n_kv > n_head or n_head % n_kv:
            raise ConfigError(msg("kv_memory.heads_multiple", n_head=n_head, n_kv=n_kv))
    head_dim = _check_positive(head_dim, "head_dim")
    hidden = hidden or n_head * head_dim
    kinds, window, kind_notes = _layer_kinds(hf, section, mtype, n_layer)
    notes += kind_notes
    if rank is not None:
        kinds = tuple("mla" if kind == "full" else kind for kind in kinds)

    positions = _optional_positive(section, _POSITION_NAMES)
    vocab = _optional_positive(section, ("vocab_size", "padded_vocab_size"))
    for limit, value in (
        ("heads", n_head),
        ("heads", n_kv),
        ("hidden", hidden),
        ("vocab", vocab),
        ("positions", positions),
    ):
        if value is not None and value > settings.MODEL_LIMITS[limit]:
            raise ConfigError(msg("kv_memory.field_over", field=limit, value=value, most=settings.MODEL_LIMITS[limit]))
    inter = _optional_positive(section, ("intermediate_size", "n_inner", "ffn_hidden_size", "ffn_dim"))
    if inter is None and mtype in _UNGATED_MLP:
        inter = 4 * hidden  # GPT-2's n_inner: null and Falcon's ffn_hidden_size default
    tied = _attr(hf, section, "tie_word_embeddings", True)
    shared_inter = _whole(section.get("shared_expert_intermediate_size"))
    moe_inter = _whole(section.get("moe_intermediate_size"))
    n_shared = _whole(section.get("n_shared_experts")) or 0
    shared = 3 * hidden * (n_shared * (moe_inter or 0) + (shared_inter or 0)) + (hidden if shared_inter else 0)
    dtype = section.get("torch_dtype") or section.get("dtype") or raw.get("torch_dtype") or raw.get("dtype")
    params = _count_params(
        {
            "hidden": hidden, "vocab": vocab, "inter": inter, "kinds": kinds, "tied": bool(tied),
            "model_type": mtype, "positions": positions, "type_vocab": _whole(section.get("type_vocab_size")),
            "n_head": n_head, "n_kv": n_kv, "head_dim": head_dim, "nope": nope, "rope": rope, "v_dim": v_dim,
            "q_rank": _whole(section.get("q_lora_rank")), "rank": rank,
            "experts": _whole(
                section.get("n_routed_experts") or section.get("num_local_experts") or section.get("num_experts")
            ),
            "moe_inter": moe_inter, "sparse_step": _whole(section.get("decoder_sparse_step")),
            "mlp_only": section.get("mlp_only_layers"), "dense_first": _whole(section.get("first_k_dense_replace")) or 0,
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
        raw_json=json.dumps({**section, "model_type": model_type}, sort_keys=True) if hf is not None else None,
    )


def read_config_file(path: Path) -> dict:
    """A config.json's object, read once with its size cap (:func:`attnviz.core.files.read_bounded`: a FIFO, a
    device or a /proc file refused, never waited on); ConfigError, one line, for anything else."""
    try:
        data = read_bounded(path, settings.KV_CONFIG_MAX_BYTES)
    except PathError as err:
        raise ConfigError(carried(err) or str(err)) from err
    return parse_config_json(data, shown_path(path))


def _float_marker(obj: dict) -> Any:
    """transformers writes a non-finite float as {"__float__": "Infinity"}; read it back as the float."""
    if len(obj) == 1 and isinstance(obj.get("__float__"), str):
        with contextlib.suppress(ValueError):
            return float(obj["__float__"])
    return obj


def parse_config_json(data: bytes | str, name: str) -> dict:
    """An uploaded or pasted config.json's object; ConfigError when it is too large, not JSON or not an object."""
    size = len(data.encode("utf-8") if isinstance(data, str) else data)
    if size > settings.KV_CONFIG_MAX_BYTES:
        raise ConfigError(msg("kv_memory.too_large", name=name, size=size, most=settings.KV_CONFIG_MAX_BYTES))
    try:
        text = data if isinstance(data, str) else data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(msg("kv_memory.cannot_read", name=name, error=_one_line(err))) from err
    try:
        raw = json.loads(text, object_hook=_float_marker)
    except (json.JSONDecodeError, RecursionError) as err:
        raise ConfigError(msg("kv_memory.not_json", name=name, error=_one_line(err))) from err
    if not isinstance(raw, dict):
        raise ConfigError(msg("kv_memory.json_type", name=name, type=type(raw).__name__))
    return raw


def _bundled_config(key: str) -> dict:
    """A bundled model's config, as the registry reads it without loading the model; ConfigError, one line, when
    its package is not installed."""
    try:
        return bundled_config(key)
    except ModelUnavailableError as err:
        raise ConfigError(carried(err) or str(err)) from err


def load_config(path_or_name: str) -> KVConfig:
    """A config.json path, a model folder (its config.json), or a bundled model's key ("minilm", "smollm2")."""
    try:  # what the path names, symlinks followed: stat never blocks (a FIFO is refused when it is opened)
        kind = kind_of(path_or_name)
        if kind is None and path_or_name in BUNDLED_CHOICES:
            return config_from_dict(_bundled_config(path_or_name), name=path_or_name)
        path = Path(path_or_name)
        if kind == "directory":
            path = path / "config.json"
            if kind_of(path) is None:
                raise ConfigError(msg("kv_memory.no_config_json", path=shown_path(path_or_name)))
        elif kind is None:
            raise ConfigError(msg("kv_memory.not_a_file", path=shown_path(path_or_name)))
    except PathError as err:
        raise ConfigError(carried(err) or str(err)) from err
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.name
    return config_from_dict(read_config_file(path), name=_shown_name(name))


def _shown_name(name: str) -> str:
    """A file or folder name as a config's title: control characters visible, a long one cut."""
    shown = printable(name)
    return shown if len(shown) <= 80 else shown[:79] + "…"


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

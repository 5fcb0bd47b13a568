"""A config.json's sizes checked as written, before transformers builds anything from them.

transformers' config classes act on their sizes as they are made (Llama's ``layer_types`` is a list of
``num_hidden_layers`` names), and a model built from a config allocates every weight it declares. So a
``num_hidden_layers`` of 1,000,000,000 hangs ``AutoConfig`` itself, and a config whose layers x width far
exceeds its weights files makes ``from_pretrained`` allocate what no file holds. Both are refused here from the
raw JSON, with the numbers, under every name a family spells the field with.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnviz import settings

# every spelling of a size, and the limit of settings.MODEL_LIMITS it is held to
SIZE_FIELDS = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers", "encoder_layers"),
    "heads": (
        "num_attention_heads", "n_head", "num_heads", "n_heads", "attention_heads", "decoder_attention_heads",
        "encoder_attention_heads", "num_key_value_heads", "num_kv_heads", "n_head_kv", "n_kv_heads",
    ),
    "hidden": ("hidden_size", "n_embd", "d_model", "dim", "head_dim", "kv_channels"),
    "vocab": ("vocab_size", "padded_vocab_size"),
    "positions": ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "n_ctx"),
    "intermediate": (
        "intermediate_size", "n_inner", "ffn_hidden_size", "ffn_dim", "moe_intermediate_size",
        "decoder_ffn_dim", "encoder_ffn_dim",
    ),
}  # fmt: skip
SECTIONS = ("text_config", "language_config", "llm_config")  # a multimodal config's text model


@dataclass(frozen=True)
class Oversize:
    """One size of a config over its limit: the field as the file spells it, its value and the limit."""

    field: str
    value: int
    most: int
    limit: str


def _sections(raw: dict) -> list[dict]:
    return [raw, *(raw[name] for name in SECTIONS if isinstance(raw.get(name), dict))]


def oversized(raw: dict) -> Oversize | None:
    """The first size in ``raw`` (or its text model's section) over ``settings.MODEL_LIMITS``, or None.

    Only whole numbers are judged here; a size that is no whole number is refused, by name, where it is read.
    """
    for section in _sections(raw):
        for limit, names in SIZE_FIELDS.items():
            most = settings.MODEL_LIMITS[limit]
            for name in names:
                value = section.get(name)
                if isinstance(value, int) and not isinstance(value, bool) and value > most:
                    return Oversize(name, value, most, limit)
    return None


def _size(section: dict, limit: str) -> int | None:
    for name in SIZE_FIELDS[limit]:
        value = section.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def least_params(raw: dict) -> int | None:
    """A lower bound on the weights a config declares: the token embedding (vocab x hidden) and, per layer, the
    query and output projections (2 x hidden x heads x head_dim). What a family adds (K/V, MLPs, experts, norms)
    only adds to it; a family that shares one layer's weights (ALBERT) is within the slack the caller allows.
    None when the config does not give layers, hidden size and vocabulary."""
    section = next((s for s in reversed(_sections(raw)) if _size(s, "layers")), raw)
    layers, hidden, vocab = _size(section, "layers"), _size(section, "hidden"), _size(section, "vocab")
    if not (layers and hidden and vocab):
        return None
    width = hidden  # heads x head_dim is hidden_size for all but a few families, where it is close to it
    return vocab * hidden + layers * 2 * hidden * width

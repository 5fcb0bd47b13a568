"""The text model inside a multimodal checkpoint: its config, and where its weights lie in the checkpoint.

A multimodal checkpoint (Gemma 3, Llama 4, Qwen3.5, Mllama, …) wraps a language model that attnviz runs like
any decoder, beside parts it never reads (a vision tower, an audio encoder, a projector). Loading it means
building the text model's own class from the text config (``config.get_text_config()``) and finding its weights
under the checkpoint's prefixes: ``language_model.model.layers.0…`` (the hub layout transformers saves),
``model.language_model.layers.0…`` (transformers 5's in-memory layout) or any other. The prefixes are read off the
checkpoint itself (:func:`key_mapping`: the one prefix under which the most of the text model's weights lie), so
no family needs a list of its own; the other parts' weights are left unread.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from attnviz.errors import ModelUnavailableError
from attnviz.i18n.message import msg
from attnviz.models.hf.config_sizes import SECTIONS as TEXT_SECTIONS  # where a multimodal config keeps its text

MULTIMODAL_PARTS = ("vision_config", "audio_config", "speech_config")  # a config with any of them is multimodal


def other_parts(config) -> list[str]:
    """The parts of a multimodal config besides its text model (["vision_config"]); [] for a text model."""
    return [part for part in MULTIMODAL_PARTS if getattr(config, part, None) is not None]


def text_config(config, name: str):
    """The config attnviz reads text with: ``config`` itself, or a multimodal checkpoint's text model's config.

    An encoder-decoder's config is itself (:mod:`attnviz.models.hf.seq2seq` loads it). ModelUnavailableError, in one
    line, for a multimodal config whose text model is not a model of its own (nothing to load apart from the rest), is an encoder-decoder, or is a prefix-LM (its
    wrapper's mask reads the prompt both ways and the answer causally: which is which, text alone does not say).
    """
    parts = other_parts(config)
    if not parts:
        return config
    try:
        text = config.get_text_config(decoder=True)
    except Exception:  # a config class with no one text model (an audio-only model's nested configs)
        text = None
    if text is None or text is config:  # an older composite config names its text model otherwise
        text = next((getattr(config, n) for n in TEXT_SECTIONS if getattr(config, n, None) is not None), None)
    if text is None or text is config or not getattr(text, "model_type", None):
        raise ModelUnavailableError(msg("model_errors.multimodal_no_text", name=name, parts=", ".join(parts)))
    if getattr(text, "is_encoder_decoder", False):
        raise ModelUnavailableError(
            msg("model_errors.multimodal_encoder_decoder", name=name, text_type=repr(text.model_type))
        )
    if getattr(text, "use_bidirectional_attention", False):  # PaliGemma: the wrapper's mask says which tokens
        raise ModelUnavailableError(msg("model_errors.multimodal_prefix_lm", name=name))  # are read both ways
    if getattr(text, "dtype", None) is None and getattr(config, "dtype", None) is not None:
        text.dtype = config.dtype  # the checkpoint's dtype is said once, on the outer config
    return text


def checkpoint_keys(where: str) -> list[str] | None:
    """Every tensor name of the safetensors checkpoint in folder ``where`` (headers only); None where it is not
    such a folder (a pickle checkpoint, a hub id not on disk)."""
    folder = Path(where)
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        return None
    from safetensors import safe_open

    keys: list[str] = []
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            keys.extend(handle.keys())
    return keys


def expected_keys(model_class, config) -> list[str]:
    """The tensor names ``model_class`` built from ``config`` has, built without memory (on the meta device)."""
    from accelerate import init_empty_weights

    with init_empty_weights():
        model = model_class._from_config(config)
    return list(model.state_dict())


def _prefix_counts(keys: Iterable[str], wanted: set[str]) -> Counter:
    """For each prefix P of a checkpoint key such that the rest is in ``wanted``, how many keys it gives."""
    counts: Counter = Counter()
    for key in keys:
        if key in wanted:
            counts[""] += 1
        for at in (i for i, char in enumerate(key) if char == "."):
            if key[at + 1 :] in wanted:
                counts[key[: at + 1]] += 1
    return counts


def key_mapping(keys: Iterable[str], expected: Iterable[str], base_prefix: str) -> dict[str, str]:
    """``from_pretrained``'s ``key_mapping`` that renames a checkpoint's text-model weights to the text class's
    names: {checkpoint prefix regex: class prefix}, {} where the names already match.

    ``expected``: the text class's tensor names; ``base_prefix``: the prefix of its base model's ("model." for a
    ``*ForCausalLM``, "" for a base model). The base model's weights lie under the checkpoint prefix that holds
    the most of them (a vision tower's layers share some names, never the embedding, the norms and the MLPs); a
    head outside the base model (``lm_head.weight``) under the prefix that holds it, if any (tied: none).
    """
    keys = list(keys)
    expected = list(expected)
    inner = {e[len(base_prefix) :] for e in expected if e.startswith(base_prefix)}
    outer = sorted({e.split(".", 1)[0] for e in expected if not e.startswith(base_prefix)})
    mapping: dict[str, str] = {}
    for head in outer:  # first: a head's pattern must win over a base-model prefix it falls under
        wanted = {e for e in expected if e.split(".", 1)[0] == head}
        found = _prefix_counts(keys, wanted).most_common(1)
        if found and found[0][0]:
            mapping[f"^{re.escape(found[0][0] + head)}\\."] = f"{head}."
    found = _prefix_counts(keys, inner).most_common(1)
    if found and found[0][0] != base_prefix:
        mapping[f"^{re.escape(found[0][0])}"] = base_prefix
    return mapping


def usual_mapping(base_prefix: str) -> dict[str, str]:
    """The renaming for a checkpoint whose names attnviz cannot read before loading (a pickle): the two layouts
    multimodal checkpoints use, the hub's (``language_model.model.…``, ``language_model.lm_head.…``) and
    transformers 5's (``model.language_model.…``, ``lm_head.…``); each pattern matches its layout only."""
    return {
        r"^language_model\.lm_head\.": "lm_head.",
        r"^language_model\.model\.": base_prefix,
        r"^model\.language_model\.": base_prefix,
    }


def has_head(keys: Iterable[str] | None, config) -> bool:
    """Whether the checkpoint holds a language-model head for the text model (or ties it to the embedding)."""
    if getattr(config, "tie_word_embeddings", False):
        return True
    return keys is None or any(key == "lm_head.weight" or key.endswith(".lm_head.weight") for key in keys)

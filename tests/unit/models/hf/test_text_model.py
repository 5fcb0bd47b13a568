"""The text model of a multimodal checkpoint: its config, and the renaming that finds its weights among the rest.

The renaming is checked by applying it as transformers does (every matching pattern, in order, each on what the
previous ones left) to hand-written checkpoint layouts: the hub's (``language_model.model.…``), transformers 5's
(``model.language_model.…``), a base model's, one already named as the text class names it, and one where a vision
tower shares the text model's layer names and has more layers than it.
"""

import re

import pytest
from transformers import AutoConfig, PretrainedConfig

from attnviz.errors import ModelUnavailableError
from attnviz.models.hf.text_model import has_head, key_mapping, other_parts, text_config, usual_mapping

TEXT_CLASS = [  # a *ForCausalLM's names: its base model under "model.", its head outside
    "model.embed_tokens.weight",
    "model.layers.0.self_attn.q_proj.weight",
    "model.layers.0.mlp.gate_proj.weight",
    "model.layers.1.self_attn.q_proj.weight",
    "model.layers.1.mlp.gate_proj.weight",
    "model.norm.weight",
    "lm_head.weight",
]
VISION = [f"vision_tower.encoder.layers.{i}.self_attn.q_proj.weight" for i in range(4)] + [
    "multi_modal_projector.linear.weight"
]


def renamed(keys: list[str], mapping: dict[str, str]) -> list[str]:
    """The keys as transformers renames them: every matching pattern fires, in order."""
    out = []
    for key in keys:
        for pattern, replacement in mapping.items():
            key = re.sub(pattern, replacement, key)
        out.append(key)
    return out


def checkpoint(prefix: str, head_prefix: str, base: str = "model.") -> list[str]:
    return [(head_prefix + k) if not k.startswith(base) else prefix + k[len(base) :] for k in TEXT_CLASS] + VISION


@pytest.mark.parametrize(
    ("prefix", "head_prefix", "expected_mapping"),
    [
        ("language_model.model.", "language_model.", {r"^language_model\.lm_head\.": "lm_head.", r"^language_model\.model\.": "model."}),
        ("model.language_model.", "", {r"^model\.language_model\.": "model."}),
        ("language_model.", "language_model.", {r"^language_model\.lm_head\.": "lm_head.", r"^language_model\.": "model."}),
        ("model.", "", {}),
    ],
    ids=["hub layout", "transformers 5 layout", "base and head under one prefix", "already the text class's"],
)  # fmt: skip
def test_the_text_models_weights_are_found_under_the_checkpoints_prefix(prefix, head_prefix, expected_mapping):
    keys = checkpoint(prefix, head_prefix)
    mapping = key_mapping(keys, TEXT_CLASS, "model.")
    assert mapping == expected_mapping
    assert set(TEXT_CLASS) <= set(renamed(keys, mapping))  # every text weight lands on its name
    assert all(
        key.startswith(("vision_tower.", "multi_modal_projector."))
        for key in set(renamed(keys, mapping)) - set(TEXT_CLASS)
    )


def test_a_vision_tower_with_the_same_layer_names_and_more_layers_does_not_win():
    """Its layers match the text model's attention names (q_proj of layers 0-3), never the embedding, the norm or
    the MLP: the text model's prefix holds more of the text class's weights."""
    keys = checkpoint("language_model.model.", "language_model.") + [
        f"vision_model.model.layers.{i}.self_attn.q_proj.weight" for i in range(12)
    ]
    assert key_mapping(keys, TEXT_CLASS, "model.")[r"^language_model\.model\."] == "model."
    assert r"^vision_model\.model\." not in key_mapping(keys, TEXT_CLASS, "model.")


def test_a_base_model_has_no_prefix_of_its_own():
    expected = [k.removeprefix("model.") for k in TEXT_CLASS if k.startswith("model.")]
    keys = ["text_model." + k for k in expected] + VISION
    mapping = key_mapping(keys, expected, "")
    assert mapping == {r"^text_model\.": ""}
    assert set(renamed(keys, mapping)) >= set(expected)


def test_a_tied_head_is_looked_for_nowhere():
    keys = [k.replace("model.", "model.language_model.", 1) for k in TEXT_CLASS if k != "lm_head.weight"] + VISION
    assert key_mapping(keys, TEXT_CLASS, "model.") == {r"^model\.language_model\.": "model."}
    assert not has_head(keys, PretrainedConfig(tie_word_embeddings=False))
    assert has_head(keys, PretrainedConfig(tie_word_embeddings=True))
    assert has_head(["language_model.lm_head.weight"], PretrainedConfig(tie_word_embeddings=False))
    assert has_head(None, PretrainedConfig(tie_word_embeddings=False))  # unread (a pickle checkpoint): try it


def test_a_multimodal_config_gives_its_text_config_with_the_checkpoints_dtype():
    outer = AutoConfig.for_model("gemma3", dtype="bfloat16")
    assert other_parts(outer) == ["vision_config"]
    text = text_config(outer, "g")
    assert text.model_type == "gemma3_text" and str(text.dtype).endswith("bfloat16")
    plain = AutoConfig.for_model("llama")
    assert other_parts(plain) == [] and text_config(plain, "l") is plain


def test_what_has_no_text_model_to_load_is_refused_in_one_line():
    t5 = AutoConfig.for_model("t5")
    assert text_config(t5, "my-t5") is t5  # an encoder-decoder is its own text model (attnviz.models.hf.seq2seq)
    lonely = PretrainedConfig()
    lonely.vision_config = {"hidden_size": 8}  # a vision part and nothing that is a text model
    with pytest.raises(ModelUnavailableError) as err:
        text_config(lonely, "eyes-only")
    assert err.value.args[0].key == "model_errors.multimodal_no_text"
    assert "eyes-only" in str(err.value) and "vision_config" in str(err.value)


def test_a_prefix_lm_is_refused_as_text_alone_cannot_say_which_tokens_are_read_both_ways():
    with pytest.raises(ModelUnavailableError) as err:
        text_config(AutoConfig.for_model("paligemma"), "pali")
    assert err.value.args[0].key == "model_errors.multimodal_prefix_lm" and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("prefix", "head_prefix"), [("language_model.model.", "language_model."), ("model.language_model.", "")]
)
def test_a_checkpoint_whose_names_are_unread_gets_the_two_usual_layouts(prefix, head_prefix):
    """A pickle is not opened before loading: the renaming covers the hub's layout and transformers 5's."""
    keys = checkpoint(prefix, head_prefix)
    assert set(TEXT_CLASS) <= set(renamed(keys, usual_mapping("model.")))

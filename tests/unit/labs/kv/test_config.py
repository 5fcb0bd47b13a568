"""KV-cache memory: hand-computed cases from real config.json files, quantisation overheads, engine rules, errors."""

import json

import pytest

from attnviz import settings
from attnviz.errors import ConfigError
from attnviz.labs.kv.config import KVConfig, config_from_dict, load_config
from attnviz.labs.kv.memory import estimate
from tests.unit.labs.kv.real_configs import DEEPSEEK_V3, FALCON_7B, GEMMA2_9B, LLAMA3_8B, MISTRAL_7B_V01

FALCON_40B = {
    "model_type": "falcon", "n_layer": 60, "n_head": 128, "num_kv_heads": 8, "hidden_size": 8192,
    "new_decoder_architecture": True, "parallel_attn": True, "alibi": False, "vocab_size": 65024, "bias": False,
}  # fmt: skip

GEMMA3_4B = {  # multimodal: the decoder is in text_config
    "model_type": "gemma3",
    "text_config": {
        "model_type": "gemma3_text", "num_hidden_layers": 34, "num_attention_heads": 8, "num_key_value_heads": 4,
        "head_dim": 256, "hidden_size": 2560, "intermediate_size": 10240, "sliding_window": 1024,
        "sliding_window_pattern": 6, "vocab_size": 262208,
    },
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152},
}  # fmt: skip


def test_mistral_null_window_means_none():
    cfg = config_from_dict({**MISTRAL_7B_V01, "sliding_window": None})
    assert cfg.window is None and set(cfg.layer_kinds) == {"full"}


def test_gemma2_alternation_without_transformers_knowing_the_type():
    cfg = config_from_dict({**GEMMA2_9B, "model_type": "my_gemma2"})
    assert set(cfg.layer_kinds) == {"sliding"}  # an unknown type with a window: every layer slides
    explicit = ["sliding_attention", "full_attention"] * 21
    cfg = config_from_dict({**GEMMA2_9B, "model_type": "my_gemma2", "layer_types": explicit})
    assert cfg.layer_kinds[:2] == ("sliding", "full")


def test_gemma3_text_config_and_pattern():
    cfg = config_from_dict(GEMMA3_4B)
    assert cfg.n_layer == 34 and cfg.head_dim == 256 and cfg.window == 1024
    assert cfg.layer_kinds[:6] == ("sliding",) * 5 + ("full",)
    assert cfg.layer_kinds.count("full") == 5


def test_falcon_multi_query_and_new_decoder():
    cfg = config_from_dict(FALCON_7B)
    assert (cfg.attention, cfg.n_kv_head, cfg.head_dim) == ("mqa", 1, 64)
    assert estimate(cfg).bytes_per_token == 32 * 1 * 64 * 2 * 2
    cfg = config_from_dict(FALCON_40B)
    assert (cfg.attention, cfg.n_kv_head, cfg.head_dim) == ("gqa", 8, 64)


def test_absent_kv_heads_means_mha_for_unknown_types():
    cfg = config_from_dict(
        {"model_type": "brand_new", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}
    )
    assert (cfg.attention, cfg.n_kv_head, cfg.head_dim) == ("mha", 4, 16)
    assert any("does not know" in str(note) for note in cfg.notes)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"num_hidden_layers": None}, "num_hidden_layers"),
        ({"num_attention_heads": None}, "num_attention_heads"),
        ({"hidden_size": None, "head_dim": None}, "hidden_size"),
        ({"num_hidden_layers": -2}, "num_hidden_layers"),
        ({"num_attention_heads": 0}, "num_attention_heads"),
        ({"num_key_value_heads": -8}, "num_key_value_heads"),
        ({"num_key_value_heads": 5}, "num_key_value_heads"),
        ({"num_hidden_layers": 3.5}, "num_hidden_layers"),
        ({"num_hidden_layers": "32"}, "num_hidden_layers"),
        ({"hidden_size": 4095, "model_type": "unknown_type"}, "hidden_size"),
        ({"sliding_window": 0}, "sliding_window"),
        ({"layer_types": ["full_attention"]}, "layer_types"),
        ({"num_hidden_layers": 10**9}, "num_hidden_layers"),
    ],
)
def test_bad_configs_name_the_field(change, field):
    raw = {k: v for k, v in {**LLAMA3_8B, **change}.items() if v is not None}
    with pytest.raises(ConfigError, match=field) as info:
        config_from_dict(raw)
    assert "\n" not in str(info.value)


def test_mla_needs_its_rope_dim():
    raw = {k: v for k, v in DEEPSEEK_V3.items() if k != "qk_rope_head_dim"}
    with pytest.raises(ConfigError):
        config_from_dict({**raw, "model_type": "custom_mla"})


def test_kvconfig_validates():
    with pytest.raises(ConfigError, match="window"):
        KVConfig("x", 1, 2, 2, 8, 16, ("sliding",), None)
    with pytest.raises(ConfigError, match="kind"):
        KVConfig("x", 1, 2, 2, 8, 16, ("weird",), None)


def test_load_config_files(tmp_path):
    folder = tmp_path / "llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA3_8B))
    assert load_config(str(folder)).name == "llama"
    assert load_config(str(folder / "config.json")).n_kv_head == 8
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="is not JSON"):
        load_config(str(bad))
    array = tmp_path / "array.json"
    array.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="not an object"):
        load_config(str(array))
    huge = tmp_path / "huge.json"
    huge.write_text(" " * (settings.KV_CONFIG_MAX_BYTES + 1))
    with pytest.raises(ConfigError, match="limit"):
        load_config(str(huge))
    with pytest.raises(ConfigError, match=r"no config\.json"):
        load_config(str(tmp_path))
    with pytest.raises(ConfigError, match="not a file"):
        load_config(str(tmp_path / "missing.json"))

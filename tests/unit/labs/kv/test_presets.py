"""The KV-cache presets: one sourced data file each, well-formed, and parsed by attnviz.labs.kv.config into the
geometry each model really has, with caches of the size worked out by hand."""

import json
from importlib import resources
from urllib.parse import urlparse

import pytest

from attnviz.labs.kv.config import config_from_dict
from attnviz.labs.kv.memory import estimate
from attnviz.labs.kv.presets import FIELDS, ORDER, PRESETS, Preset, parse_preset

FILES = resources.files("attnviz.labs.kv.presets")

# What config_from_dict must make of each preset. "kinds" maps a layer kind to how many layers
# have it; "first_kinds" pins the start of the layer pattern where its order matters.
EXPECTED = {
    "gpt2": dict(n_layer=12, n_head=12, n_kv_head=12, head_dim=64, attention="mha", window=None, kinds={"full": 12}),
    "llama-3-8b": dict(n_layer=32, n_head=32, n_kv_head=8, head_dim=128, attention="gqa", window=None),
    "llama-3-70b": dict(n_layer=80, n_head=64, n_kv_head=8, head_dim=128, attention="gqa", window=None),
    "llama-3.1-405b": dict(n_layer=126, n_head=128, n_kv_head=8, head_dim=128, attention="gqa", window=None),
    "mistral-7b-v0.1": dict(
        n_layer=32, n_head=32, n_kv_head=8, head_dim=128, attention="gqa", window=4096, kinds={"sliding": 32}
    ),
    "mixtral-8x7b": dict(
        n_layer=32, n_head=32, n_kv_head=8, head_dim=128, attention="gqa", window=None, kinds={"full": 32}
    ),
    "qwen2.5-7b": dict(
        n_layer=28, n_head=28, n_kv_head=4, head_dim=128, attention="gqa", window=None, kinds={"full": 28}
    ),
    "qwen2.5-72b": dict(
        n_layer=80, n_head=64, n_kv_head=8, head_dim=128, attention="gqa", window=None, kinds={"full": 80}
    ),
    "qwen3-32b": dict(n_layer=64, n_head=64, n_kv_head=8, head_dim=128, attention="gqa", window=None),
    "qwen3-next-80b-a3b": dict(
        n_layer=48,
        n_head=16,
        n_kv_head=2,
        head_dim=256,
        attention="gqa",
        kinds={"linear": 36, "full": 12},
        first_kinds=("linear", "linear", "linear", "full"),
    ),
    "gemma-2-9b": dict(
        n_layer=42,
        n_head=16,
        n_kv_head=8,
        head_dim=256,
        attention="gqa",
        window=4096,
        kinds={"sliding": 21, "full": 21},
        first_kinds=("sliding", "full", "sliding", "full"),
    ),
    "gemma-2-27b": dict(
        n_layer=46,
        n_head=32,
        n_kv_head=16,
        head_dim=128,
        attention="gqa",
        window=4096,
        kinds={"sliding": 23, "full": 23},
        first_kinds=("sliding", "full"),
    ),
    "gemma-3-27b": dict(
        n_layer=62,
        n_head=32,
        n_kv_head=16,
        head_dim=128,
        attention="gqa",
        window=1024,
        kinds={"sliding": 52, "full": 10},
        first_kinds=("sliding",) * 5 + ("full",),
    ),
    "phi-3-mini-4k": dict(n_layer=32, n_head=32, n_kv_head=32, head_dim=96, attention="mha", window=2047),
    "smollm2-1.7b": dict(
        n_layer=24, n_head=32, n_kv_head=32, head_dim=64, attention="mha", window=None, kinds={"full": 24}
    ),
    "falcon-7b": dict(n_layer=32, n_head=71, n_kv_head=1, head_dim=64, attention="mqa", window=None),
    "falcon-40b": dict(n_layer=60, n_head=128, n_kv_head=8, head_dim=64, attention="gqa", window=None),
    "deepseek-v2-lite": dict(
        n_layer=27, n_head=16, attention="mla", kv_lora_rank=512, qk_rope_head_dim=64, kinds={"mla": 27}
    ),
    "deepseek-v3": dict(
        n_layer=61, n_head=128, attention="mla", kv_lora_rank=512, qk_rope_head_dim=64, kinds={"mla": 61}
    ),
}


def test_there_are_enough_presets_and_each_has_expectations():
    assert len(PRESETS) >= 16
    assert set(PRESETS) == set(EXPECTED)


def test_keys_are_unique_and_match_the_preset():
    keys = [preset.key for preset in PRESETS.values()]
    assert len(keys) == len(set(keys))
    assert all(name == preset.key for name, preset in PRESETS.items())
    titles = [preset.title for preset in PRESETS.values()]
    assert len(titles) == len(set(titles))


@pytest.mark.parametrize("key", sorted(PRESETS))
def test_every_preset_is_sourced_and_typed(key):
    preset = PRESETS[key]
    url = urlparse(preset.source)
    assert url.scheme == "https" and url.netloc, preset.source
    assert preset.config.get("model_type"), key
    assert preset.note, key


def test_every_data_file_is_a_preset_in_the_menu_order():
    names = sorted(entry.name for entry in FILES.iterdir() if entry.name.endswith(".json"))
    assert names == sorted(f"{key}.json" for key in ORDER) and list(PRESETS) == list(ORDER)


@pytest.mark.parametrize("key", ORDER)
def test_each_data_file_loads_with_its_source_and_nothing_else(key):
    data = json.loads((FILES / f"{key}.json").read_text(encoding="utf-8"))
    assert set(data) == FIELDS and data["source"].startswith("https://"), key
    assert parse_preset(key, json.dumps(data)) == PRESETS[key]  # the file is the preset: nothing added on load


def test_a_malformed_data_file_is_refused_with_its_name():
    good = {"title": "x", "source": "https://huggingface.co/x/config.json", "config": {"model_type": "llama"}}
    assert parse_preset("x", json.dumps(good)).config == {"model_type": "llama"}
    for bad, match in [
        ({k: v for k, v in good.items() if k != "source"}, "exactly"),  # no source: refused, never defaulted
        ({**good, "extra": 1}, "exactly"),
        ({**good, "source": "huggingface.co/x"}, "https"),
        ({**good, "config": ["model_type"]}, "model_type"),
    ]:
        with pytest.raises(ValueError, match=match) as err:
            parse_preset("x", json.dumps(bad))
        assert "'x'" in str(err.value)
    with pytest.raises(ValueError, match="exactly"):
        parse_preset("x", "[]")


def test_caches_of_the_size_worked_out_by_hand():
    """Bytes per token = layers x K and V x KV heads x head_dim x bytes per value (bf16: 2), each layer kind alone."""
    llama = estimate(config_from_dict(PRESETS["llama-3-8b"].config, "llama"), seq_len=8192)
    assert llama.bytes_per_token == 32 * 2 * 8 * 128 * 2 == 131_072  # 128 KiB a token
    assert llama.total_bytes == 8192 * 131_072 == 2**30  # 1 GiB at its 8,192 positions
    # Gemma-2-9B at 8,192 tokens: 21 full layers hold all of them, 21 sliding layers their window of 4,096
    gemma = estimate(config_from_dict(PRESETS["gemma-2-9b"].config, "gemma"), batch=2, seq_len=8192)
    per_layer_token = 2 * 8 * 256 * 2  # 8,192 bytes
    assert gemma.per_kind == {"full": 2 * 21 * 8192 * per_layer_token, "sliding": 2 * 21 * 4096 * per_layer_token}
    assert gemma.total_bytes == 2 * 63 * 4096 * per_layer_token == 4_227_858_432
    # DeepSeek-V3 caches one latent of 512 and a RoPE key of 64 per layer, not its 128 heads' K and V
    deepseek = estimate(config_from_dict(PRESETS["deepseek-v3"].config, "deepseek"), seq_len=1000)
    assert deepseek.bytes_per_token == 61 * (512 + 64) * 2 == 70_272
    assert deepseek.total_bytes == 1000 * 70_272
    # Falcon-7B: multi-query, one K/V head of 64 for its 71 query heads
    falcon = estimate(config_from_dict(PRESETS["falcon-7b"].config, "falcon"), seq_len=10)
    assert falcon.bytes_per_token == 32 * 2 * 1 * 64 * 2 == 8192


def test_nested_configs_keep_their_text_config():
    gemma3 = PRESETS["gemma-3-27b"].config
    assert gemma3["model_type"] == "gemma3"
    assert gemma3["text_config"]["model_type"] == "gemma3_text"
    assert "num_hidden_layers" not in gemma3


def test_qwen25_carries_a_window_value_that_is_switched_off():
    config = PRESETS["qwen2.5-7b"].config
    assert config["sliding_window"] == 131072 and config["use_sliding_window"] is False


def test_a_malformed_preset_is_refused_with_its_values():
    with pytest.raises(ValueError, match="https"):
        Preset(key="x", title="x", config={"model_type": "llama"}, source="http://example.com/config.json")
    with pytest.raises(ValueError, match="model_type"):
        Preset(key="x", title="x", config={"hidden_size": 8}, source="https://huggingface.co/x/config.json")


@pytest.mark.parametrize("key", sorted(PRESETS))
def test_each_preset_parses_into_its_real_geometry(key):
    expected = EXPECTED[key]
    kv = config_from_dict(PRESETS[key].config, key)

    for field in ("n_layer", "n_head", "n_kv_head", "head_dim", "kv_lora_rank", "qk_rope_head_dim"):
        if field in expected:
            assert getattr(kv, field) == expected[field], f"{key}: {field}"
    if "window" in expected:
        assert kv.window == expected["window"], f"{key}: window"
    assert kv.attention == expected["attention"], f"{key}: attention"

    kinds = tuple(kv.layer_kinds)
    assert len(kinds) == expected["n_layer"], f"{key}: one kind per layer"
    assert set(kinds) <= {"full", "sliding", "linear", "mla"}, kinds
    if "kinds" in expected:
        counts = {kind: kinds.count(kind) for kind in set(kinds)}
        assert counts == expected["kinds"], f"{key}: layer kinds"
    if "first_kinds" in expected:
        assert kinds[: len(expected["first_kinds"])] == expected["first_kinds"], f"{key}: layer order"


def test_reading_a_preset_leaves_it_as_it_was():
    """transformers' config classes write into nested dicts (DeepSeek-V3's rope_scaling gained rope_theta and
    rope_type): reading a preset must not change it for the next reader (a shuffled run found it)."""
    for key, preset in PRESETS.items():
        before = json.dumps(preset.config, sort_keys=True)
        config_from_dict(preset.config, name=key)
        assert json.dumps(preset.config, sort_keys=True) == before, key

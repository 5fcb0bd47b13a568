"""KV-cache memory: hand-computed cases from real config.json files, quantisation overheads, engine rules, errors."""

from fractions import Fraction
from types import SimpleNamespace

import pytest

from attnviz.labs.kv.config import config_from_dict, kv_config_of
from attnviz.labs.kv.memory import bytes_per_element, estimate, max_fit, row_bytes, variants, weight_bytes
from tests.unit.labs.kv.real_configs import DEEPSEEK_V3, FALCON_7B, GEMMA2_9B, LLAMA3_8B, MISTRAL_7B_V01

# from the models' config.json files (fields that matter here)
GPT2 = {
    "model_type": "gpt2", "n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024, "n_ctx": 1024,
    "vocab_size": 50257, "n_inner": None, "activation_function": "gelu_new",
}  # fmt: skip

QWEN25_7B = {
    "model_type": "qwen2", "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
    "hidden_size": 3584, "intermediate_size": 18944, "vocab_size": 152064, "max_position_embeddings": 32768,
    "sliding_window": 131072, "use_sliding_window": False, "max_window_layers": 28, "tie_word_embeddings": False,
}  # fmt: skip

GEMMA_7B = {
    "model_type": "gemma", "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16,
    "head_dim": 256, "hidden_size": 3072, "intermediate_size": 24576, "vocab_size": 256000,
    "max_position_embeddings": 8192,
}  # fmt: skip

QWEN3_NEXT = {
    "model_type": "qwen3_next", "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2,
    "head_dim": 256, "hidden_size": 2048, "full_attention_interval": 4, "vocab_size": 151936,
    "num_experts": 512, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
}  # fmt: skip


def test_gpt2_small_is_mha_with_gpt2_names():
    cfg = config_from_dict(GPT2)
    assert (cfg.attention, cfg.n_layer, cfg.n_kv_head, cfg.head_dim, cfg.max_positions) == ("mha", 12, 12, 64, 1024)
    assert estimate(cfg).bytes_per_token == 12 * 12 * 64 * 2 * 2 == 36_864
    assert estimate(cfg, batch=2, seq_len=1024).total_bytes == 2 * 1024 * 36_864
    assert abs(cfg.n_params - 124_439_808) / 124_439_808 < 0.002  # the real count, with norms and biases


def test_llama3_8b_gqa():
    cfg = config_from_dict(LLAMA3_8B)
    assert (cfg.attention, cfg.n_kv_head, cfg.head_dim) == ("gqa", 8, 128)
    assert estimate(cfg).bytes_per_token == 32 * 8 * 128 * 2 * 2 == 131_072
    assert estimate(cfg, seq_len=8192).total_bytes == 8192 * 131_072  # 1 GiB
    assert abs(cfg.n_params - 8_030_261_248) / 8_030_261_248 < 0.001
    assert weight_bytes(cfg, "bf16") == 2 * cfg.n_params


def test_mistral_window_caps_the_cache():
    cfg = config_from_dict(MISTRAL_7B_V01)
    assert cfg.layer_kinds == ("sliding",) * 32 and cfg.window == 4096
    result = estimate(cfg, seq_len=8192)
    assert result.bytes_per_token == 131_072  # no window applied
    assert result.tokens_per_layer == [4096] * 32
    assert result.total_bytes == 4096 * 131_072
    assert estimate(cfg, seq_len=1000).total_bytes == 1000 * 131_072


def test_gemma2_alternates_sliding_and_full():
    cfg = config_from_dict(GEMMA2_9B)
    assert cfg.layer_kinds[:4] == ("sliding", "full", "sliding", "full") and cfg.window == 4096
    per_layer_token = 2 * 8 * 256 * 2
    result = estimate(cfg, seq_len=8192)
    assert result.bytes_per_token == 42 * per_layer_token
    assert result.per_kind == {"sliding": 21 * 4096 * per_layer_token, "full": 21 * 8192 * per_layer_token}
    assert result.per_layer[0] == 4096 * per_layer_token and result.per_layer[1] == 8192 * per_layer_token


def test_deepseek_v3_mla_caches_one_latent():
    cfg = config_from_dict(DEEPSEEK_V3)
    assert cfg.attention == "mla" and set(cfg.layer_kinds) == {"mla"}
    assert estimate(cfg).bytes_per_token == 61 * (512 + 64) * 2 == 70_272
    assert abs(cfg.n_params - 671e9) / 671e9 < 0.01  # DeepSeek's 671B, without the MTP module


def test_qwen25_sliding_window_switched_off():
    cfg = config_from_dict(QWEN25_7B)
    assert cfg.window is None and set(cfg.layer_kinds) == {"full"}
    assert estimate(cfg).bytes_per_token == 28 * 4 * 128 * 2 * 2


def test_explicit_head_dim_wins():
    cfg = config_from_dict(GEMMA_7B)
    assert cfg.head_dim == 256  # not 3072 / 16 = 192
    assert estimate(cfg).bytes_per_token == 28 * 16 * 256 * 2 * 2


def test_hybrid_linear_layers_hold_no_kv():
    cfg = config_from_dict(QWEN3_NEXT)
    assert cfg.layer_kinds[:4] == ("linear", "linear", "linear", "full")
    assert cfg.layer_kinds.count("full") == 12
    result = estimate(cfg, seq_len=100)
    assert result.bytes_per_token == 12 * 2 * 2 * 256 * 2
    assert result.per_kind["linear"] == 0 and result.tokens_per_layer[0] == 0
    assert cfg.n_params is None  # linear-attention weights are not modelled


def test_bytes_per_element_exact():
    assert bytes_per_element("fp32") == 4 and bytes_per_element("bf16") == bytes_per_element("fp16") == 2
    assert bytes_per_element("fp8") == Fraction(34, 32) == Fraction(17, 16)  # q8_0's 1.0625
    assert bytes_per_element("int8") == Fraction(36, 32)
    assert bytes_per_element("int4") == Fraction(20, 32)  # q4_1
    assert bytes_per_element("int4", group_size=64) == Fraction(1, 2) + Fraction(4, 64)
    with pytest.raises(ValueError, match="dtype"):
        bytes_per_element("q9")
    with pytest.raises(ValueError, match="group_size"):
        bytes_per_element("int8", 0)


def test_quantised_rows_count_their_scales():
    assert row_bytes(128, "fp8") == 128 + 4 * 2
    assert row_bytes(128, "int8") == 128 + 4 * 4
    assert row_bytes(128, "int4") == 64 + 4 * 4
    assert row_bytes(80, "int8") == 80 + 3 * 4  # a short last group still stores its scale and zero
    assert row_bytes(3, "int4") == 2 + 4  # 1.5 bytes of payload round up to 2
    cfg = config_from_dict(LLAMA3_8B)
    assert estimate(cfg, dtype="fp8").bytes_per_token == 32 * 2 * 8 * (128 + 8) == 69_632
    assert estimate(cfg, dtype="int4").bytes_per_token == 32 * 2 * 8 * 80
    mla = config_from_dict(DEEPSEEK_V3)
    assert estimate(mla, dtype="int8").bytes_per_token == 61 * (576 + 18 * 4)


def test_paged_blocks_round_each_sequence_up():
    cfg = config_from_dict(LLAMA3_8B)
    result = estimate(cfg, batch=3, seq_len=1000, block_size=16)
    assert result.tokens_per_layer == [1008] * 32
    assert result.total_bytes == 3 * 1008 * 131_072
    mistral = config_from_dict(MISTRAL_7B_V01)
    assert estimate(mistral, seq_len=5000, block_size=1000).tokens_per_layer[0] == 5000  # the window 4096 rounded


def test_estimate_rejects_bad_sizes():
    cfg = config_from_dict(GPT2)
    for kwargs in ({"batch": 0}, {"seq_len": -1}, {"block_size": 0}, {"seq_len": True}):
        with pytest.raises(ValueError):
            estimate(cfg, **kwargs)


def test_max_fit():
    cfg = config_from_dict(LLAMA3_8B)
    gpu = 80 * 10**9
    fit = max_fit(cfg, gpu, seq_len=8192)
    free = gpu - 2 * cfg.n_params
    assert fit["free_bytes"] == free and fit["max_batch"] == free // (8192 * 131_072)
    assert fit["max_seq_len"] == 8192 and fit["seq_len_capped"]  # max_position_embeddings
    big = config_from_dict({**LLAMA3_8B, "max_position_embeddings": 10**6})
    fit = max_fit(big, gpu)
    assert fit["max_seq_len"] == free // 131_072 and not fit["seq_len_capped"]
    assert max_fit(cfg, 10**9)["max_batch"] == 0  # the weights alone do not fit


def test_variants():
    cfg = config_from_dict(GPT2)
    out = variants(cfg)
    assert {k: v.attention for k, v in out.items()} == {"mha": "mha", "gqa": "gqa", "mqa": "mqa", "mla": "mla"}
    assert out["gqa"].n_kv_head == 2 and out["mla"].kv_lora_rank == 256 and out["mla"].qk_rope_head_dim == 32
    llama = variants(config_from_dict(LLAMA3_8B))
    assert llama["gqa"].n_kv_head == 8 and llama["mha"].n_kv_head == 32
    falcon = variants(config_from_dict(FALCON_7B))  # 71 heads: prime, no GQA between MHA and MQA
    assert "gqa" not in falcon
    ds = variants(config_from_dict(DEEPSEEK_V3))
    assert ds["mla"].attention == "mla" and ds["mha"].layer_kinds[0] == "full"


def test_kv_config_of_a_source():
    source = SimpleNamespace(name="embedded", n_layer=2, n_head=4, n_kv_head=2, head_dim=16, d_model=64)
    cfg = kv_config_of(source)
    assert cfg.attention == "gqa" and estimate(cfg).bytes_per_token == 2 * 2 * 2 * 16 * 2

"""KV-cache memory: hand-computed cases from real config.json files, quantisation overheads, engine rules, errors."""

from attnviz.labs.kv.config import config_from_dict
from attnviz.labs.kv.engines import engine_estimates
from tests.unit.labs.kv.real_configs import DEEPSEEK_V3, GEMMA2_9B


def test_engine_rules():
    cfg = config_from_dict(GEMMA2_9B)
    token = 2 * 8 * 256 * 2
    figures = {f.engine: f for f in engine_estimates(cfg, batch=2, seq_len=10_000)}
    vllm_sliding = (-(-min(4095 + 8192, 10_000) // 16) + 1) * 16
    assert figures["vLLM"].total_bytes == 2 * 21 * token * (10_000 + vllm_sliding)
    assert figures["llama.cpp"].total_bytes == 2 * 21 * token * (10_240 + 4608)  # PAD(4096 + 512, 256)
    assert figures["transformers DynamicCache"].total_bytes == 2 * 21 * token * (10_000 + 4095)
    assert all(f.rule and f.source.startswith("https://") for f in figures.values())
    off = engine_estimates(cfg, 1, 10_000, vllm_hybrid_allocator=False)[0]
    assert off.total_bytes == 42 * token * 10_000


def test_engine_mla_and_unsupported_dtypes():
    cfg = config_from_dict(DEEPSEEK_V3)
    vllm, llamacpp, hf = engine_estimates(cfg, 1, 4096)
    assert vllm.total_bytes == hf.total_bytes == 4096 * 70_272
    assert llamacpp.total_bytes == 4096 * 61 * (576 + 512) * 2
    vllm, llamacpp, hf = engine_estimates(cfg, 1, 4096, dtype="int4")
    assert vllm.total_bytes is None and hf.total_bytes is None and "int4" in str(vllm.rule)
    assert llamacpp.total_bytes == 4096 * 61 * (576 + 512) // 32 * 20  # q4_1


def test_falcon_40b_s_original_config_is_read_with_its_eight_kv_heads():
    """RefinedWeb's n_head_kv: 2 x 60 layers x 8 heads x 64 x 2 B x 4,096 tokens, not 128 heads' worth."""
    from attnviz.labs.kv.config import config_from_dict
    from attnviz.labs.kv.memory import estimate

    raw = {"model_type": "RefinedWeb", "n_head": 128, "n_head_kv": 8, "n_layer": 60, "hidden_size": 8192}
    cfg = config_from_dict(raw, "falcon-40b")
    assert (cfg.n_kv_head, cfg.head_dim) == (8, 64)
    assert estimate(cfg, 1, 4096, "bf16").total_bytes == 2 * 60 * 8 * 64 * 2 * 4096 == 503_316_480


def test_transformers_figure_is_measured_from_the_modeling_code_and_says_why_falcon_holds_more():
    """Falcon's new decoder broadcasts K and V to every query head before caching: 11,264 B, twice the minimum."""
    from attnviz.i18n.translate import tr
    from attnviz.labs.kv.agreement import transformers_agreement
    from attnviz.labs.kv.config import config_from_dict
    from attnviz.labs.kv.memory import estimate

    raw = {
        "model_type": "falcon",
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_kv_heads": 2,
        "hidden_size": 32,
        "new_decoder_architecture": True,
        "vocab_size": 100,
    }
    cfg = config_from_dict(raw, "tiny falcon")
    hf = engine_estimates(cfg, 2, 11, "fp32")[-1]
    assert estimate(cfg, 2, 11, "fp32").total_bytes == 2 * 2 * 2 * 8 * 4 * 11 * 2 == 5632
    assert hf.total_bytes == 11264 and "Measured" in tr(hf.rule)
    why = transformers_agreement(cfg, 2, 11, "fp32")  # the page says why beside the two figures
    assert [(r.kind, r.bytes) for r in why.reasons] == [("broadcast", 5632)] and "repeats each" in str(
        why.reasons[0].text
    )


def test_starcoder_s_multi_query_wins_over_a_key_value_head_count():
    from attnviz.labs.kv.config import config_from_dict

    raw = {"model_type": "gpt_bigcode", "n_layer": 2, "n_head": 4, "n_embd": 32, "multi_query": True}
    assert config_from_dict({**raw, "num_key_value_heads": 2}).n_kv_head == 1

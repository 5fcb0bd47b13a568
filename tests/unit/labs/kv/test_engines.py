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

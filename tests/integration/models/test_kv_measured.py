"""The KV cache a model really holds equals attnviz.labs.kv.memory's estimate to the byte, and decoding with it is exact.

SmolLM2-135M (30 layers, 9 query heads, 3 K/V heads, head_dim 64, float32 on
the CPU) through transformers' DynamicCache and through our own layers'
KVCache; the embedded model's blocks with KVCache as MHA, GQA and MQA.
"""

import pytest
import torch

from attnviz.core.attention import KVCache
from attnviz.labs.kv.config import kv_config_of, load_config
from attnviz.labs.kv.measure import decode_timing, measured_cache_bytes, recompute_seconds_at
from attnviz.labs.kv.memory import estimate
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.models.hf.kv import dynamic_cache_tensors, prefill_our_layers

TEXT = "The quick brown fox jumps over the lazy dog, and the cat watches from the fence."
LENGTHS = (1, 7, 64, 200)


@pytest.fixture(scope="module")
def smollm2_config():
    """SmolLM2's cache shape read from its bundled config, as the KV memory page reads it (not from the model)."""
    return load_config("smollm2")


@pytest.mark.parametrize("batch", [1, 2])
def test_smollm2_dynamic_cache_bytes_equal_the_estimate_exactly(smollm2, smollm2_config, batch):
    cfg = smollm2_config
    for seq_len in LENGTHS:
        measured = measured_cache_bytes(smollm2, TEXT, seq_len, batch=batch)
        predicted = estimate(cfg, batch=batch, seq_len=seq_len, dtype="fp32")
        assert measured.dtype == "float32" and measured.cuda_allocated_delta is None
        assert measured.tokens_per_layer == [seq_len] * 30
        assert measured.per_layer == predicted.per_layer, seq_len
        assert measured.total_bytes == predicted.total_bytes == 30 * 2 * batch * 3 * seq_len * 64 * 4, seq_len
        assert measured.bytes_per_token == 30 * 2 * 3 * 64 * 4  # 46,080 bytes per position of one sequence


def test_smollm2_our_layers_cache_the_same_bytes_and_values(smollm2, smollm2_config):
    cfg = smollm2_config
    ours = measured_cache_bytes(smollm2, TEXT, 64, batch=2, implementation="attnviz")
    assert ours.implementation == "attnviz"
    assert ours.per_layer == estimate(cfg, batch=2, seq_len=64, dtype="fp32").per_layer
    ids = torch.tensor([smollm2.encode(TEXT, 64).ids] * 2)  # (2, T)
    caches, theirs = prefill_our_layers(smollm2, ids)
    for cache, (k, v) in zip(caches, dynamic_cache_tensors(theirs), strict=True):
        assert cache.k.shape == k.shape == (2, 3, ids.shape[1], 64)
        assert (cache.k - k).abs().max().item() <= 1e-5 and (cache.v - v).abs().max().item() <= 1e-5


@pytest.mark.parametrize("n_kv_head", [8, 2, 1], ids=["MHA", "GQA", "MQA"])
def test_embedded_kvcache_bytes_equal_the_estimate_exactly(n_kv_head):
    model = EmbeddedModel(EmbeddedConfig(d_model=64, n_head=8, n_kv_head=n_kv_head, n_layer=3, causal=True))
    cfg = kv_config_of(model)
    for batch in (1, 2):
        for seq_len in LENGTHS:
            measured = measured_cache_bytes(model, TEXT, seq_len, batch=batch)
            predicted = estimate(cfg, batch=batch, seq_len=seq_len, dtype="fp32")
            assert measured.per_layer == predicted.per_layer, (batch, seq_len)
            assert measured.total_bytes == predicted.total_bytes == 3 * 2 * batch * n_kv_head * seq_len * 8 * 4


def test_embedded_kvcache_in_bf16_equals_the_estimate():
    model = EmbeddedModel(EmbeddedConfig(d_model=64, n_head=8, n_kv_head=2, n_layer=2, causal=True))
    measured = measured_cache_bytes(model, TEXT, 33, batch=2, dtype=torch.bfloat16)
    assert measured.dtype == "bfloat16"
    assert measured.total_bytes == estimate(kv_config_of(model), batch=2, seq_len=33, dtype="bf16").total_bytes
    assert next(model.parameters()).dtype == torch.float32  # a copy was cast, not the model


def test_smollm2_decoding_with_the_cache_gives_the_recomputed_tokens(smollm2):
    cached = decode_timing(smollm2, "The capital of France is", 8, mode="cache")
    recomputed = decode_timing(smollm2, "The capital of France is", 8, mode="recompute")
    assert cached.tokens == recomputed.tokens
    assert len(cached.seconds_per_token) == 8 and cached.positions[0] == cached.n_prompt
    # a sampled recompute step reads exactly that prefix: it predicts the token the full run did
    decoder = smollm2.greedy_decoder("The capital of France is", use_cache=False)
    decoder.seek(cached.tokens[:5])
    assert decoder.step() == cached.tokens[5]
    assert len(recompute_seconds_at(smollm2, "The capital of France is", cached.tokens, [0, 7])) == 2


def test_embedded_decoding_with_kvcache_equals_a_full_causal_forward():
    model = EmbeddedModel(EmbeddedConfig(d_model=64, n_head=8, n_kv_head=2, n_layer=3, causal=True))
    x = torch.randn(1, 12, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model.forward_blocks(x, None)  # (1, 12, d_model)
        caches = [KVCache() for _ in range(3)]
        steps = [model.forward_blocks(x[:, :5], caches)]  # a prefill of 5, then one token at a time
        steps += [model.forward_blocks(x[:, t : t + 1], caches) for t in range(5, 12)]
    assert (torch.cat(steps, dim=1) - full).abs().max().item() < 1e-5
    cached = decode_timing(model, "the cat sat on the mat", 16, mode="cache")
    recomputed = decode_timing(model, "the cat sat on the mat", 16, mode="recompute")
    assert cached.tokens == recomputed.tokens
    decoder = model.greedy_decoder("the cat sat on the mat", use_cache=False)
    decoder.seek(cached.tokens[:9])
    assert decoder.step() == cached.tokens[9]  # a sampled step reads exactly the prefix the full run did


def test_decoding_errors_name_the_problem():
    bidirectional = EmbeddedModel(EmbeddedConfig(d_model=16, n_head=2, n_layer=1))
    with pytest.raises(ValueError, match="causal"):
        decode_timing(bidirectional, "a b", 2)
    with pytest.raises(ValueError, match="mode 'sample'"):
        decode_timing(bidirectional, "a b", 2, mode="sample")

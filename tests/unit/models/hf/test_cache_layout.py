"""transformers' cache, counted from a prefill of the architecture's own code on the meta device."""

import pytest

from attnviz.models.hf import cache_layout

LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "hidden_size": 32, "intermediate_size": 64, "vocab_size": 100}  # fmt: skip
MISTRAL = {**LLAMA, "model_type": "mistral", "sliding_window": 5}


@pytest.mark.slow
def test_a_prefill_is_counted_as_every_k_and_v_element_it_leaves():
    # 2 layers x (K and V) x batch 2 x 2 KV heads x 11 tokens x head_dim 8
    assert cache_layout.transformers_cache_elements(LLAMA, 2, 11, (None, None)) == 2 * 2 * 2 * 2 * 11 * 8


@pytest.mark.slow
def test_a_long_prefill_is_measured_short_and_extended_layer_by_layer(monkeypatch):
    whole = cache_layout.transformers_cache_elements(MISTRAL, 1, 40, (4, 4))
    monkeypatch.setattr(cache_layout, "MEASURE_TOKENS", 16)
    assert cache_layout.transformers_cache_elements(MISTRAL, 1, 40, (4, 4)) == whole
    assert cache_layout.transformers_cache_elements(LLAMA, 1, 40, (None, None)) == 2 * 2 * 2 * 40 * 8


def test_a_config_transformers_rejects_is_not_measured():
    assert cache_layout.transformers_cache_elements({**LLAMA, "num_attention_heads": 3}, 1, 4, (None, None)) is None

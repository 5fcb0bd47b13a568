"""Real models' config.json files, as their hubs publish them, for the KV cache tests."""

LLAMA3_8B = {
    "model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192,
    "tie_word_embeddings": False, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
}  # fmt: skip

MISTRAL_7B_V01 = {
    "model_type": "mistral", "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 32000, "max_position_embeddings": 32768,
    "sliding_window": 4096, "tie_word_embeddings": False,
}  # fmt: skip

GEMMA2_9B = {  # the original file: no layer_types, transformers alternates sliding / full
    "model_type": "gemma2", "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8,
    "head_dim": 256, "hidden_size": 3584, "intermediate_size": 14336, "vocab_size": 256000,
    "sliding_window": 4096, "max_position_embeddings": 8192,
}  # fmt: skip

DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
    "n_shared_experts": 1, "first_k_dense_replace": 3, "moe_layer_freq": 1, "kv_lora_rank": 512,
    "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
    "vocab_size": 129280, "max_position_embeddings": 163840, "tie_word_embeddings": False,
}  # fmt: skip

FALCON_7B = {
    "model_type": "falcon", "n_layer": 32, "n_head": 71, "hidden_size": 4544, "multi_query": True,
    "new_decoder_architecture": False, "parallel_attn": True, "alibi": False, "vocab_size": 65024, "bias": False,
}  # fmt: skip

# Jamba v0.1's config.json (4 attention layers among 28 Mamba ones), kept once, in the benchmark that times it
from benchmarks.kv_cache import JAMBA_V01  # noqa: E402, F401

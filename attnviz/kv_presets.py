"""Presets: real models' config.json fields, each with where the numbers come from.

The KV-cache estimator page offers these so an engineer can size a GPU without
downloading anything. Each ``config`` copies fields of the model's published
``config.json`` with the same names, values and nesting (a multimodal model keeps
its ``text_config``); fields the estimator does not need, or that could not be
checked, are left out rather than guessed. A field's absence is therefore
meaningful: Gemma-3's file, for instance, has no ``sliding_window_pattern`` and
relies on the library default of 6.

Each ``note`` says what is special about the model's cache and how the numbers
were checked. "Cross-checked" means the fields were matched against verbatim
copies of the file embedded in public repositories (transformers/TensorRT-LLM/
Megatron-Bridge tests, inference engines' config fixtures), found by exact-string
search of stored GitHub sources; the Hugging Face file itself was not fetched.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse


def _hf(repo: str) -> str:
    return f"https://huggingface.co/{repo}/blob/main/config.json"


@dataclass(frozen=True)
class Preset:
    """One model's config.json fields (read-only by convention: copy before editing) and their source."""

    key: str  # "llama-3-8b"
    title: str  # "Llama-3-8B (GQA 32/8)"
    config: dict  # the config.json fields, exactly as in the file
    source: str  # URL of the config.json (or model card)
    note: str = ""  # what is special and how it was verified

    def __post_init__(self) -> None:
        url = urlparse(self.source)
        if url.scheme != "https" or not url.netloc:
            raise ValueError(f"preset {self.key!r}: source must be an https URL, got {self.source!r}")
        if "model_type" not in self.config:
            raise ValueError(f"preset {self.key!r}: config has no model_type (keys: {sorted(self.config)})")


_PRESETS: tuple[Preset, ...] = (
    Preset(
        key="gpt2",
        title="GPT-2 124M (MHA 12/12)",
        config={
            "activation_function": "gelu_new",
            "architectures": ["GPT2LMHeadModel"],
            "layer_norm_epsilon": 1e-05,
            "model_type": "gpt2",
            "n_ctx": 1024,
            "n_embd": 768,
            "n_head": 12,
            "n_layer": 12,
            "n_positions": 1024,
            "vocab_size": 50257,
        },
        source=_hf("openai-community/gpt2"),
        note=(
            "GPT-2 names: n_head, n_layer, n_embd, n_positions; no n_inner in the file (it defaults to "
            "4 * n_embd) and no torch_dtype (the weights are float32). Learned positions, so 1,024 tokens is "
            "a hard limit. From knowledge of the file; the shape (768/12/12, 50,257 tokens) matches many "
            "public fixtures."
        ),
    ),
    Preset(
        key="llama-3-8b",
        title="Llama-3-8B (GQA 32/8)",
        config={
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "max_position_embeddings": 8192,
            "model_type": "llama",
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "num_key_value_heads": 8,
            "rms_norm_eps": 1e-05,
            "rope_scaling": None,
            "rope_theta": 500000.0,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 128256,
        },
        source=_hf("meta-llama/Meta-Llama-3-8B"),
        note=(
            "Plain GQA: 4 query heads share each K/V head, head_dim 4096/32 = 128. Cross-checked against "
            "Meta's params.json (dim 4096, 32 layers, 32 heads, 8 KV heads, vocab 128,256, rope_theta 5e5) "
            "quoted in public repos."
        ),
    ),
    Preset(
        key="llama-3-70b",
        title="Llama-3-70B (GQA 64/8)",
        config={
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": 8192,
            "intermediate_size": 28672,
            "max_position_embeddings": 8192,
            "model_type": "llama",
            "num_attention_heads": 64,
            "num_hidden_layers": 80,
            "num_key_value_heads": 8,
            "rms_norm_eps": 1e-05,
            "rope_theta": 500000.0,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 128256,
        },
        source=_hf("meta-llama/Meta-Llama-3-70B"),
        note=(
            "GQA with 8 query heads per K/V head; 80 layers x 8 KV heads x 128 gives 320 KiB of bf16 K+V per "
            "token. Shape cross-checked against several public model tables (8192/80/64/8, 28,672, 128,256)."
        ),
    ),
    Preset(
        key="llama-3.1-405b",
        title="Llama-3.1-405B (GQA 128/8)",
        config={
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": 16384,
            "intermediate_size": 53248,
            "max_position_embeddings": 131072,
            "model_type": "llama",
            "num_attention_heads": 128,
            "num_hidden_layers": 126,
            "num_key_value_heads": 8,
            "rms_norm_eps": 1e-05,
            "rope_scaling": {
                "factor": 8.0,
                "high_freq_factor": 4.0,
                "low_freq_factor": 1.0,
                "original_max_position_embeddings": 8192,
                "rope_type": "llama3",
            },
            "rope_theta": 500000.0,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 128256,
        },
        source=_hf("meta-llama/Llama-3.1-405B"),
        note=(
            "128K context via llama3 RoPE scaling; 126 layers x 8 KV heads x 128 is 504 KiB of bf16 K+V per "
            "token, about 63 GiB for one 128K sequence. Shape cross-checked against public fixtures "
            "(16384/126/128/8, 53,248). Meta's original MP16 checkpoint duplicates KV heads to 16 for "
            "16-way tensor parallelism; TensorRT-LLM configs built from it show 16, the HF file says 8."
        ),
    ),
    Preset(
        key="mistral-7b-v0.1",
        title="Mistral-7B-v0.1 (GQA 32/8, sliding window 4096)",
        config={
            "architectures": ["MistralForCausalLM"],
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "max_position_embeddings": 32768,
            "model_type": "mistral",
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "num_key_value_heads": 8,
            "rms_norm_eps": 1e-05,
            "rope_theta": 10000.0,
            "sliding_window": 4096,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 32000,
        },
        source=_hf("mistralai/Mistral-7B-v0.1"),
        note=(
            "Every layer uses a 4,096-token sliding window and there is no use_sliding_window key, so a "
            "rolling cache holds at most 4,096 tokens per layer however long the context. v0.2 and later drop "
            "the window (sliding_window null, rope_theta 1e6). Cross-checked against public config fixtures."
        ),
    ),
    Preset(
        key="mixtral-8x7b",
        title="Mixtral-8x7B (MoE 8 experts, GQA 32/8)",
        config={
            "architectures": ["MixtralForCausalLM"],
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "max_position_embeddings": 32768,
            "model_type": "mixtral",
            "num_attention_heads": 32,
            "num_experts_per_tok": 2,
            "num_hidden_layers": 32,
            "num_key_value_heads": 8,
            "num_local_experts": 8,
            "rms_norm_eps": 1e-05,
            "rope_theta": 1000000.0,
            "sliding_window": None,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 32000,
        },
        source=_hf("mistralai/Mixtral-8x7B-v0.1"),
        note=(
            "Experts change the weights (about 46.7B) but not the cache: attention is Mistral-7B's GQA 32/8 "
            "without a window (sliding_window null), so K/V is the same as a dense 7B's. Shape cross-checked "
            "against public fixtures (num_local_experts 8, num_experts_per_tok 2)."
        ),
    ),
    Preset(
        key="qwen2.5-7b",
        title="Qwen2.5-7B (GQA 28/4, window present but off)",
        config={
            "architectures": ["Qwen2ForCausalLM"],
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "max_position_embeddings": 131072,
            "max_window_layers": 28,
            "model_type": "qwen2",
            "num_attention_heads": 28,
            "num_hidden_layers": 28,
            "num_key_value_heads": 4,
            "rms_norm_eps": 1e-06,
            "rope_theta": 1000000.0,
            "sliding_window": 131072,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "use_mrope": False,
            "use_sliding_window": False,
            "vocab_size": 152064,
        },
        source=_hf("Qwen/Qwen2.5-7B"),
        note=(
            "use_sliding_window is false, so the sliding_window value (131,072) must be ignored: every layer "
            "keeps full K/V. 7 query heads per K/V head, head_dim 3584/28 = 128. Cross-checked verbatim "
            "against copies of the file in public repos (max_window_layers 28, sliding_window 131072, "
            "use_sliding_window false). The -Instruct file says max_position_embeddings 32768."
        ),
    ),
    Preset(
        key="qwen2.5-72b",
        title="Qwen2.5-72B (GQA 64/8, window present but off)",
        config={
            "architectures": ["Qwen2ForCausalLM"],
            "hidden_size": 8192,
            "intermediate_size": 29568,
            "max_position_embeddings": 131072,
            "max_window_layers": 80,
            "model_type": "qwen2",
            "num_attention_heads": 64,
            "num_hidden_layers": 80,
            "num_key_value_heads": 8,
            "rms_norm_eps": 1e-05,
            "rope_theta": 1000000.0,
            "sliding_window": 131072,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "use_sliding_window": False,
            "vocab_size": 152064,
        },
        source=_hf("Qwen/Qwen2.5-72B"),
        note=(
            "Same trap as Qwen2.5-7B: a sliding_window value with use_sliding_window false, so all 80 layers "
            "are full attention. Shape cross-checked against several public fixtures (8192/80/64/8, 29,568, "
            "152,064); max_window_layers and rms_norm_eps from knowledge of the file."
        ),
    ),
    Preset(
        key="qwen3-32b",
        title="Qwen3-32B (GQA 64/8, head_dim 128 != 5120/64)",
        config={
            "architectures": ["Qwen3ForCausalLM"],
            "head_dim": 128,
            "hidden_size": 5120,
            "intermediate_size": 25600,
            "max_position_embeddings": 40960,
            "max_window_layers": 64,
            "model_type": "qwen3",
            "num_attention_heads": 64,
            "num_hidden_layers": 64,
            "num_key_value_heads": 8,
            "rms_norm_eps": 1e-06,
            "rope_scaling": None,
            "rope_theta": 1000000,
            "sliding_window": None,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "use_sliding_window": False,
            "vocab_size": 151936,
        },
        source=_hf("Qwen/Qwen3-32B"),
        note=(
            "The explicit head_dim (128) differs from hidden_size / num_attention_heads (80), so an estimator "
            "that derives head_dim undercounts the cache by 37.5%. Cross-checked verbatim against a public "
            "copy of the file (that copy had num_hidden_layers cut to 16 for an experiment; 64 is confirmed "
            "by several other sources)."
        ),
    ),
    Preset(
        key="qwen3-next-80b-a3b",
        title="Qwen3-Next-80B-A3B (hybrid: 3 linear-attention layers per full one)",
        config={
            "architectures": ["Qwen3NextForCausalLM"],
            "decoder_sparse_step": 1,
            "full_attention_interval": 4,
            "head_dim": 256,
            "hidden_size": 2048,
            "intermediate_size": 5120,
            "linear_conv_kernel_dim": 4,
            "linear_key_head_dim": 128,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 32,
            "linear_value_head_dim": 128,
            "max_position_embeddings": 262144,
            "model_type": "qwen3_next",
            "moe_intermediate_size": 512,
            "num_attention_heads": 16,
            "num_experts": 512,
            "num_experts_per_tok": 10,
            "num_hidden_layers": 48,
            "num_key_value_heads": 2,
            "partial_rotary_factor": 0.25,
            "rope_theta": 10000000,
            "shared_expert_intermediate_size": 512,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 151936,
        },
        source=_hf("Qwen/Qwen3-Next-80B-A3B-Instruct"),
        note=(
            "Only every 4th layer (full_attention_interval 4: layers 3, 7, ..., 47) is softmax attention with "
            "a growing K/V cache (GQA 16/2, head_dim 256); the other 36 are Gated DeltaNet linear attention "
            "with a fixed-size state. The file gives the pattern as full_attention_interval; it does not list "
            "layer_types (transformers derives them). Shape cross-checked against public tables "
            "(48 layers, 16/2 heads, head_dim 256, 512 experts, 10 per token); the linear_* fields from "
            "knowledge of the file."
        ),
    ),
    Preset(
        key="gemma-2-9b",
        title="Gemma-2-9B (GQA 16/8, head_dim 256, local/global alternating)",
        config={
            "architectures": ["Gemma2ForCausalLM"],
            "attn_logit_softcapping": 50.0,
            "cache_implementation": "hybrid",
            "final_logit_softcapping": 30.0,
            "head_dim": 256,
            "hidden_size": 3584,
            "intermediate_size": 14336,
            "max_position_embeddings": 8192,
            "model_type": "gemma2",
            "num_attention_heads": 16,
            "num_hidden_layers": 42,
            "num_key_value_heads": 8,
            "query_pre_attn_scalar": 256,
            "rms_norm_eps": 1e-06,
            "rope_theta": 10000.0,
            "sliding_window": 4096,
            "sliding_window_size": 4096,
            "torch_dtype": "float32",
            "vocab_size": 256000,
        },
        source=_hf("google/gemma-2-9b"),
        note=(
            "Layers alternate: even layers use a 4,096-token sliding window, odd layers are global, so half "
            "the cache stops growing at 4,096 tokens. head_dim 256 is explicit (3584/16 would give 224). "
            "The file has no layer_types; the alternation is the architecture's. Cross-checked against "
            "Megatron-Bridge's test fixture of this file (it writes rope_parameters where the hub file has "
            "rope_theta)."
        ),
    ),
    Preset(
        key="gemma-2-27b",
        title="Gemma-2-27B (GQA 32/16, head_dim 128, local/global alternating)",
        config={
            "architectures": ["Gemma2ForCausalLM"],
            "attn_logit_softcapping": 50.0,
            "cache_implementation": "hybrid",
            "final_logit_softcapping": 30.0,
            "head_dim": 128,
            "hidden_size": 4608,
            "intermediate_size": 36864,
            "max_position_embeddings": 8192,
            "model_type": "gemma2",
            "num_attention_heads": 32,
            "num_hidden_layers": 46,
            "num_key_value_heads": 16,
            "query_pre_attn_scalar": 144,
            "rms_norm_eps": 1e-06,
            "rope_theta": 10000.0,
            "sliding_window": 4096,
            "sliding_window_size": 4096,
            "torch_dtype": "float32",
            "vocab_size": 256000,
        },
        source=_hf("google/gemma-2-27b"),
        note=(
            "Alternating 4,096-window and global layers like Gemma-2-9B; head_dim 128 while "
            "query_pre_attn_scalar is 144 (= 4608/32), so the softmax scale is not 1/sqrt(head_dim). "
            "Cross-checked against Megatron-Bridge's test fixture of this file."
        ),
    ),
    Preset(
        key="gemma-3-27b",
        title="Gemma-3-27B (GQA 32/16, 5 local : 1 global, window 1024)",
        config={
            "architectures": ["Gemma3ForConditionalGeneration"],
            "model_type": "gemma3",
            "text_config": {
                "head_dim": 128,
                "hidden_size": 5376,
                "intermediate_size": 21504,
                "model_type": "gemma3_text",
                "num_attention_heads": 32,
                "num_hidden_layers": 62,
                "num_key_value_heads": 16,
                "query_pre_attn_scalar": 168,
                "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                "sliding_window": 1024,
            },
            "torch_dtype": "bfloat16",
        },
        source=_hf("google/gemma-3-27b-it"),
        note=(
            "Multimodal file: the language model's fields sit in text_config (vision_config omitted here). "
            "Five of every six layers use a 1,024-token window; layers 5, 11, ..., 59 are global, so only 10 "
            "of 62 layers grow with context. The file states no sliding_window_pattern, vocab_size or "
            "max_position_embeddings: the pattern 6, vocab 262,208 and 131,072 positions are "
            "Gemma3TextConfig defaults. Cross-checked verbatim against TensorRT-LLM's Gemma3-27B test config "
            "and another public copy of the text_config."
        ),
    ),
    Preset(
        key="phi-3-mini-4k",
        title="Phi-3-mini-4k-instruct (MHA 32/32, window 2047)",
        config={
            "architectures": ["Phi3ForCausalLM"],
            "hidden_size": 3072,
            "intermediate_size": 8192,
            "max_position_embeddings": 4096,
            "model_type": "phi3",
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "num_key_value_heads": 32,
            "original_max_position_embeddings": 4096,
            "rms_norm_eps": 1e-05,
            "rope_scaling": None,
            "rope_theta": 10000.0,
            "sliding_window": 2047,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 32064,
        },
        source=_hf("microsoft/Phi-3-mini-4k-instruct"),
        note=(
            "Full multi-head attention: 32 K/V heads of 96, i.e. 384 KiB of bf16 K+V per token, 3x "
            "Llama-3-8B's. The file carries sliding_window 2047 (with no use_sliding_window key); some "
            "engines ignore it, so the estimate below 4K tokens does not depend on it. Cross-checked "
            "verbatim against TensorRT-LLM's Phi-3 test config and other public copies."
        ),
    ),
    Preset(
        key="smollm2-1.7b",
        title="SmolLM2-1.7B (MHA 32/32, head_dim 64)",
        config={
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "max_position_embeddings": 8192,
            "model_type": "llama",
            "num_attention_heads": 32,
            "num_hidden_layers": 24,
            "num_key_value_heads": 32,
            "rms_norm_eps": 1e-05,
            "rope_scaling": None,
            "rope_theta": 130000,
            "tie_word_embeddings": True,
            "torch_dtype": "bfloat16",
            "vocab_size": 49152,
        },
        source=_hf("HuggingFaceTB/SmolLM2-1.7B"),
        note=(
            "A small model with no K/V sharing: 32 K/V heads of 64 over 24 layers is 192 KiB of bf16 K+V per "
            "token, more than Llama-3-8B's 128 KiB. Cross-checked verbatim against several public copies of "
            "the SmolLM2-1.7B(-Instruct) file."
        ),
    ),
    Preset(
        key="falcon-7b",
        title="Falcon-7B (MQA 71/1)",
        config={
            "alibi": False,
            "architectures": ["FalconForCausalLM"],
            "bias": False,
            "hidden_size": 4544,
            "layer_norm_epsilon": 1e-05,
            "model_type": "falcon",
            "multi_query": True,
            "new_decoder_architecture": False,
            "num_attention_heads": 71,
            "num_hidden_layers": 32,
            "parallel_attn": True,
            "torch_dtype": "bfloat16",
            "vocab_size": 65024,
        },
        source=_hf("tiiuae/falcon-7b"),
        note=(
            "Multi-query attention: multi_query true with the old decoder gives one shared K/V head of "
            "4544/71 = 64, so the cache is 71x smaller than MHA. A config re-saved by transformers also shows "
            "num_kv_heads 71 (the default fill-in), which transformers ignores unless new_decoder_architecture "
            "is true. No max_position_embeddings in the file (2,048 in practice). Cross-checked against a "
            "public dump of the falcon-7b-instruct config and several fixtures."
        ),
    ),
    Preset(
        key="falcon-40b",
        title="Falcon-40B (GQA 128/8, new decoder)",
        config={
            "alibi": False,
            "architectures": ["FalconForCausalLM"],
            "bias": False,
            "hidden_size": 8192,
            "layer_norm_epsilon": 1e-05,
            "model_type": "falcon",
            "new_decoder_architecture": True,
            "num_attention_heads": 128,
            "num_hidden_layers": 60,
            "num_kv_heads": 8,
            "parallel_attn": True,
            "torch_dtype": "bfloat16",
            "vocab_size": 65024,
        },
        source=_hf("tiiuae/falcon-40b"),
        note=(
            "new_decoder_architecture true: num_kv_heads (8) K/V groups of 8192/128 = 64, and multi_query is "
            "not consulted. Cross-checked against the RefinedWeb-era file quoted in public repos (n_head 128, "
            "n_head_kv 8, n_layer 60, num_kv_heads 8) and NeMo's converter mapping."
        ),
    ),
    Preset(
        key="deepseek-v2-lite",
        title="DeepSeek-V2-Lite (MLA, latent 512 + rope 64)",
        config={
            "architectures": ["DeepseekV2ForCausalLM"],
            "first_k_dense_replace": 1,
            "hidden_size": 2048,
            "intermediate_size": 10944,
            "kv_lora_rank": 512,
            "max_position_embeddings": 163840,
            "model_type": "deepseek_v2",
            "moe_intermediate_size": 1408,
            "moe_layer_freq": 1,
            "n_routed_experts": 64,
            "n_shared_experts": 2,
            "num_attention_heads": 16,
            "num_experts_per_tok": 6,
            "num_hidden_layers": 27,
            "num_key_value_heads": 16,
            "q_lora_rank": None,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "rms_norm_eps": 1e-06,
            "rope_scaling": {
                "beta_fast": 32,
                "beta_slow": 1,
                "factor": 40,
                "mscale": 0.707,
                "mscale_all_dim": 0.707,
                "original_max_position_embeddings": 4096,
                "type": "yarn",
            },
            "rope_theta": 10000,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "v_head_dim": 128,
            "vocab_size": 102400,
        },
        source=_hf("deepseek-ai/DeepSeek-V2-Lite"),
        note=(
            "Multi-head latent attention: a cache holding the compressed latent stores kv_lora_rank + "
            "qk_rope_head_dim = 576 values per token per layer whatever the head count; an engine that "
            "expands K/V per head stores 16 x (192 + 128) instead. q_lora_rank is null (a full q_proj). "
            "num_key_value_heads 16 is in the file but does not describe the latent cache. Cross-checked "
            "against a public fixture that copies this model's config."
        ),
    ),
    Preset(
        key="deepseek-v3",
        title="DeepSeek-V3 (MLA, 61 layers, 128 heads)",
        config={
            "architectures": ["DeepseekV3ForCausalLM"],
            "first_k_dense_replace": 3,
            "hidden_size": 7168,
            "intermediate_size": 18432,
            "kv_lora_rank": 512,
            "max_position_embeddings": 163840,
            "model_type": "deepseek_v3",
            "moe_intermediate_size": 2048,
            "moe_layer_freq": 1,
            "n_group": 8,
            "n_routed_experts": 256,
            "n_shared_experts": 1,
            "num_attention_heads": 128,
            "num_experts_per_tok": 8,
            "num_hidden_layers": 61,
            "num_key_value_heads": 128,
            "num_nextn_predict_layers": 1,
            "q_lora_rank": 1536,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "quantization_config": {
                "activation_scheme": "dynamic",
                "fmt": "e4m3",
                "quant_method": "fp8",
                "weight_block_size": [128, 128],
            },
            "rms_norm_eps": 1e-06,
            "rope_scaling": {
                "beta_fast": 32,
                "beta_slow": 1,
                "factor": 40,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "original_max_position_embeddings": 4096,
                "type": "yarn",
            },
            "rope_theta": 10000,
            "tie_word_embeddings": False,
            "topk_group": 4,
            "torch_dtype": "bfloat16",
            "v_head_dim": 128,
            "vocab_size": 129280,
        },
        source=_hf("deepseek-ai/DeepSeek-V3"),
        note=(
            "MLA: 576 cached values per token per layer (512 latent + 64 RoPE key), 61 x 576 x 2 bytes = "
            "about 69 KiB per token in bf16, against about 4.8 MiB for the same 128 heads of 192/128 as MHA. "
            "Weights ship in FP8 (quantization_config) although torch_dtype says bfloat16. The MTP module "
            "(num_nextn_predict_layers 1) is an extra layer outside the 61. Cross-checked against an "
            "annotated public copy of the file and DeepSeek's README_WEIGHTS (61 layers)."
        ),
    ),
)

PRESETS: dict[str, Preset] = {preset.key: preset for preset in _PRESETS}
if len(PRESETS) != len(_PRESETS):
    raise ValueError(f"duplicate preset keys: {sorted(p.key for p in _PRESETS)}")

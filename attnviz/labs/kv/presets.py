"""Presets: real models' config.json fields, each with where the numbers come from.

The KV-cache estimator page offers these so an engineer can size a GPU without
downloading anything. Each ``config`` copies fields of the model's published
``config.json`` with the same names, values and nesting (a multimodal model keeps
its ``text_config``); fields the estimator does not need, or that could not be
checked, are left out rather than guessed. A field's absence is therefore
meaningful: Gemma-3's file, for instance, has no ``sliding_window_pattern`` and
relies on the library default of 6.

Each ``note`` (in the catalogues, attnviz/locales, ``[kv_presets.note]``) says what is special about the model's cache and how the numbers
were checked. "Cross-checked" means the fields were matched against verbatim
copies of the file embedded in public repositories (transformers/TensorRT-LLM/
Megatron-Bridge tests, inference engines' config fixtures), found by exact-string
search of stored GitHub sources; the Hugging Face file itself was not fetched.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

from attnviz.i18n.message import Text, msg


def _hf(repo: str) -> str:
    return f"https://huggingface.co/{repo}/blob/main/config.json"


@dataclass(frozen=True)
class Preset:
    """One model's config.json fields (read-only by convention: copy before editing) and their source."""

    key: str  # "llama-3-8b"
    title: str  # "Llama-3-8B (GQA 32/8)"
    config: dict  # the config.json fields, exactly as in the file
    source: str  # URL of the config.json (or model card)

    @property
    def note(self) -> Text:
        """What is special about the model's cache and how its numbers were checked (the catalogue holds it)."""
        try:
            return msg(f"kv_presets.note.{self.key}")
        except KeyError:
            return ""

    @property
    def shown_title(self) -> Text:
        """The title to show, from the catalogue where it has one (``title`` stays the English one)."""
        try:
            return msg(f"kv_presets.title.{self.key}")
        except KeyError:
            return self.title

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
    ),
)

PRESETS: dict[str, Preset] = {preset.key: preset for preset in _PRESETS}
if len(PRESETS) != len(_PRESETS):
    raise ValueError(f"duplicate preset keys: {sorted(p.key for p in _PRESETS)}")

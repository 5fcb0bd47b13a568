"""Small random Hugging Face models of a family, saved to a folder as a user's local model would be."""

from pathlib import Path

import torch


def tiny(folder: Path, smollm2, config_cls, model_cls, **config) -> Path:
    """A small random model of a family, saved with SmolLM2's tokenizer."""
    defaults = {
        "vocab_size": smollm2.config.vocab_size,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 256,
    }
    torch.manual_seed(0)
    model_cls(config_cls(**{**defaults, **config})).save_pretrained(folder)
    smollm2.tokenizer.save_pretrained(folder)
    return folder


SEQ2SEQ_SIZES = {
    "bart": {
        "d_model": 32,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "encoder_attention_heads": 4,
        "decoder_attention_heads": 4,
        "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64,
        "max_position_embeddings": 256,
        "init_std": 0.3,  # weights large enough that heads are not uniform
    },
    "t5": {
        "d_model": 32,
        "d_kv": 8,
        "d_ff": 64,
        "num_layers": 2,
        "num_decoder_layers": 2,
        "num_heads": 4,
        "decoder_start_token_id": 0,
        "pad_token_id": 0,
        "initializer_factor": 3.0,
    },
}


def tiny_seq2seq(folder: Path, model_type: str, dtype: torch.dtype = torch.float32, **config) -> Path:
    """A small random encoder-decoder of ``model_type`` ("bart", "t5"), saved with MiniLM's tokenizer (its vocabulary
    sizes the embedding), in ``dtype``."""
    import shutil

    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    from attnviz.models.hf.bundled import minilm_dir

    torch.manual_seed(0)
    sizes = {"vocab_size": 30528, **SEQ2SEQ_SIZES[model_type], **config}
    model = AutoModelForSeq2SeqLM.from_config(AutoConfig.for_model(model_type, **sizes)).to(dtype)
    model.save_pretrained(folder)
    for file in minilm_dir().iterdir():
        if file.name.startswith(("tokenizer", "vocab", "special_tokens")):
            shutil.copy(file, folder / file.name)
    return folder

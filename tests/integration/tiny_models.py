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

"""Layers of the embedded model, and exactly what entered them, for the walkthrough tests."""

from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.models.source import LayerInput

TEXT = "The cat sat on the mat because it was tired. 猫坐在垫子上。"

CONFIGS = {
    "mha": {"d_model": 512, "n_head": 8},  # the tutorial's example: (batch, 8, seq, 64)
    "gqa": {"d_model": 64, "n_head": 4, "n_kv_head": 2},
    "mqa": {"d_model": 48, "n_head": 6, "n_kv_head": 1},
}


def layer_input(config: str, causal: bool, layer: int = 1) -> LayerInput:
    model = EmbeddedModel(EmbeddedConfig(**CONFIGS[config], n_layer=2, causal=causal))
    return model.attention_layer(TEXT, 64, layer)

"""The embedded default model: deterministic, exact captures, honest config errors."""

import pytest

from attnviz import settings
from attnviz.models.embedded.config import EmbeddedConfig


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"d_model": 10, "n_head": 3}, r"d_model \(10\) must be divisible by n_head \(3\)"),
        ({"n_head": 4, "n_kv_head": 3}, r"n_head \(4\) must be a positive multiple of n_kv_head \(3\)"),
        ({"d_model": 7, "n_head": 7}, r"d_model \(7\) must be an even number"),
        ({"n_layer": 0}, r"n_layer \(0\) must be from 1 to 12"),
        ({"d_model": 2048}, r"d_model \(2048\) must be from 2 to 1024"),
        ({"seed": -1}, r"seed \(-1\) must be from 0"),
    ],
)
def test_invalid_configs(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EmbeddedConfig(**kwargs)


def test_defaults_come_from_settings():
    config = EmbeddedConfig()
    assert (config.d_model, config.n_head, config.n_layer, config.seed) == (
        settings.D_MODEL.default,
        settings.N_HEAD.default,
        settings.N_LAYER.default,
        settings.SEED.default,
    )

"""A Hugging Face model's RoPE frequencies: its rotary embedding's own, else its config's rope_theta, else none."""

from types import SimpleNamespace

import pytest
import torch

from attnviz.core.rope import rope_inverse_frequencies
from attnviz.models.hf.rope import rope_frequencies


def with_rotary(inv_freq: torch.Tensor) -> torch.nn.Module:
    model = torch.nn.Module()
    model.rotary_emb = torch.nn.Module()
    model.rotary_emb.register_buffer("inv_freq", inv_freq, persistent=False)
    return model


def test_the_models_own_buffer_wins_and_is_a_copy():
    inv = torch.tensor([1.0, 0.1], dtype=torch.float64)
    found = rope_frequencies(with_rotary(inv), SimpleNamespace(rope_theta=500.0), 4)
    assert found.theta is None and found.inv_freq.dtype == torch.float32 and torch.equal(found.inv_freq, inv.float())
    found.inv_freq[0] = 7.0
    assert inv[0] == 1.0  # the shared model's buffer is untouched


def test_the_config_theta_by_llamas_rule_when_the_model_has_no_buffer_of_that_width():
    by_theta = rope_frequencies(with_rotary(torch.ones(3)), SimpleNamespace(rope_theta=500.0), 8)  # 3 != 8 / 2
    assert by_theta.theta == 500.0 and torch.allclose(by_theta.inv_freq, rope_inverse_frequencies(8, 500.0))
    assert float(by_theta.inv_freq[0]) == 1.0 and float(by_theta.inv_freq[1]) == pytest.approx(500.0 ** (-2 / 8))
    nested = rope_frequencies(None, SimpleNamespace(rope_scaling={"rope_theta": 50.0}), 8)
    assert nested.theta == 50.0 and torch.allclose(nested.inv_freq, rope_inverse_frequencies(8, 50.0))


def test_no_rope_without_a_buffer_or_a_theta_or_with_an_odd_head():
    assert rope_frequencies(torch.nn.Linear(2, 2), SimpleNamespace(), 8) is None  # BERT: learned positions
    assert rope_frequencies(None, SimpleNamespace(rope_theta=1e4), 7) is None  # pairs need an even head_dim

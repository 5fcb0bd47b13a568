"""Our attention, fed the bundled models' weights, reproduces their attention: the headline check."""

import pytest

from attnviz import parity as parity_module
from attnviz.parity import ParityUnsupportedError, reproduce

TOL = 1e-5
TEXT = "The trophy did not fit in the suitcase because it was too big. 注意力机制很有用。"


@pytest.mark.parametrize("name", ["minilm", "smollm2"])
def test_every_head_of_every_layer_matches(name, request):
    model = request.getfixturevalue(name)
    ids = model.encode(TEXT, 128)[0]
    result = reproduce(model, ids)
    assert result.max_abs_diff.shape == (model.n_layer, model.n_head)
    assert result.worst <= TOL, result.max_abs_diff
    assert result.ours.shape == result.theirs.shape == (model.n_layer, model.n_head, len(ids), len(ids))
    # q, k, v come back per layer; GQA keeps only the shared K/V heads
    assert len(result.qkv) == model.n_layer
    assert result.qkv[0].q.shape[0] == model.n_head and result.qkv[0].k.shape[0] == model.n_kv_head


def test_without_rope_the_decoder_does_not_match(smollm2, monkeypatch):
    """The check can fail: drop the rotary embedding and the difference is large."""
    monkeypatch.setattr(parity_module, "rope_rotation", lambda head_dim, theta: lambda q, k, positions: (q, k))
    assert reproduce(smollm2, smollm2.encode(TEXT, 64)[0]).worst > 1e-2


def test_a_wrong_scale_does_not_match(minilm, monkeypatch):
    """d_model instead of d_k in the scale (the tutorial's 'loss stuck' bug) shows up at once."""
    original = parity_module.MultiHeadAttention.forward

    def wrong_scale(self, *args, scale=None, **kwargs):
        return original(self, *args, scale=self.d_model**-0.5, **kwargs)

    monkeypatch.setattr(parity_module.MultiHeadAttention, "forward", wrong_scale)
    assert reproduce(minilm, minilm.encode(TEXT, 64)[0]).worst > 1e-2


def test_record_qkv_comes_from_our_layers(minilm):
    record = minilm.run("The cat sat.", 32, with_qkv=True)
    q, k = record.qkv[0].q, record.qkv[0].k  # (n_head, T, head_dim)
    weights = ((q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5).softmax(-1)
    assert (weights - record.attention[0]).abs().max().item() <= TOL


def test_unsupported_architecture_is_named(minilm, monkeypatch):
    monkeypatch.setattr(minilm.config, "model_type", "gpt2")
    with pytest.raises(ParityUnsupportedError, match="not 'gpt2'"):
        reproduce(minilm, [101, 102])

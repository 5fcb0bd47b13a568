"""Our attention, fed the bundled models' weights, reproduces their attention: the headline check."""

import pytest

from attnviz import settings
from attnviz.errors import ParityUnsupportedError
from attnviz.models.hf import parity as parity_module
from attnviz.models.hf.parity import reproduce
from attnviz.models.record import PARITY_TOLERANCE
from tests.tolerances import assert_exact_on_cpu

TEXT = "The trophy did not fit in the suitcase because it was too big. 注意力机制很有用。"


@pytest.mark.parametrize("name", ["minilm", "smollm2"])
def test_every_head_of_every_layer_matches_exactly(name, request):
    model = request.getfixturevalue(name)
    ids = model.encode(TEXT, 128).ids
    result = reproduce(model, ids)
    assert result.max_abs_diff.shape == (model.n_layer, model.n_head)
    assert_exact_on_cpu(result.worst, 0.0, model.device)  # the same float32 operations in the same order
    assert result.matches
    assert result.ours.shape == result.theirs.shape == (model.n_layer, model.n_head, len(ids), len(ids))
    assert set(map(str, result.masks)) == {"causal" if model.causal else "no mask (every key)"}


def test_without_rope_the_decoder_does_not_match(smollm2, monkeypatch):
    """The check can fail: drop the rotary embedding and the difference is large."""
    monkeypatch.setattr(parity_module, "rope_rotation", lambda head_dim, theta: lambda q, k, positions: (q, k))
    result = reproduce(smollm2, smollm2.encode(TEXT, 64).ids)
    assert result.worst > 1e-2 and not result.matches


def test_a_wrong_scale_does_not_match(minilm, monkeypatch):
    """d_model instead of d_k in the scale (the tutorial's 'loss stuck' bug) shows up at once."""
    original = parity_module.MultiHeadAttention.forward

    def wrong_scale(self, *args, scale=None, **kwargs):
        return original(self, *args, scale=self.d_model**-0.5, **kwargs)

    monkeypatch.setattr(parity_module.MultiHeadAttention, "forward", wrong_scale)
    assert reproduce(minilm, minilm.encode(TEXT, 64).ids).worst > 1e-2


def test_a_wrong_mask_does_not_match(smollm2, monkeypatch):
    """Our layers get the mask the model applied; handing them no mask at all is caught."""
    original = parity_module.MultiHeadAttention.forward

    def unmasked(self, *args, mask=None, **kwargs):
        return original(self, *args, mask=None, **kwargs)

    monkeypatch.setattr(parity_module.MultiHeadAttention, "forward", unmasked)
    assert reproduce(smollm2, smollm2.encode(TEXT, 64).ids).worst > 1e-2


def test_check_parity_reads_at_most_its_token_limit(minilm):
    result = minilm.check_parity("word " * 700, 2048)
    assert result.ours.shape[-1] == settings.PARITY_TOKENS == 512 and result.worst <= PARITY_TOLERANCE
    with pytest.raises(ValueError, match="at most 512 tokens"):
        reproduce(minilm, [101] * 513)


def test_unsupported_architecture_is_named(minilm, monkeypatch):
    monkeypatch.setattr(minilm.config, "model_type", "gpt2")
    assert not minilm.supports_parity
    with pytest.raises(ParityUnsupportedError, match="not 'gpt2'"):
        reproduce(minilm, [101, 102])

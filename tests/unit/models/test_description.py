"""The typed description of a model and its capabilities: stacks, kinds, and what each source says it can do."""

import pytest

from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.models.source import AttentionSource, Capability, ModelDescription, Stack, one_stack


def test_one_stack_reads_one_kind():
    described = one_stack(2, 4, 2, 8, causal=True, d_model=32, max_positions=128)
    assert described.attention_kinds == ("self",) and described.causal
    assert described.stacks[0] == Stack("", ("self",), 2, 4, 2, 8, causal=True)


def test_an_encoder_decoder_reads_three_kinds():
    encoder = Stack("encoder", ("self",), 6, 8, 8, 64, causal=False)
    decoder = Stack("decoder", ("self", "cross"), 6, 8, 8, 64, causal=True)
    described = ModelDescription((encoder, decoder), d_model=512, max_positions=512)
    assert described.attention_kinds == ("encoder", "decoder", "cross") and described.causal


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"n_layer": 0}, "n_layer must be at least 1"),
        ({"n_head": -1}, "n_head must be at least 1"),
        ({"kinds": ()}, "a stack's kinds"),
        ({"kinds": ("self", "sideways")}, "a stack's kinds"),
    ],
)
def test_a_stack_that_cannot_be_is_refused_with_its_numbers(fields, words):
    base = {"name": "", "kinds": ("self",), "n_layer": 2, "n_head": 4, "n_kv_head": 2, "head_dim": 8, "causal": False}
    with pytest.raises(ValueError, match=words):
        Stack(**{**base, **fields})


@pytest.mark.parametrize("causal", [False, True])
def test_the_embedded_model_says_what_it_can_do(causal):
    model = EmbeddedModel(EmbeddedConfig(d_model=64, n_head=4, n_layer=2, causal=causal))
    assert isinstance(model, AttentionSource)
    base = {Capability.KEEP_QK, Capability.VALUE_NORMS, Capability.MASK, Capability.ABLATE, Capability.EDIT_HEADS}
    assert model.capabilities == base | ({Capability.KV_CACHE} if causal else set())
    assert model.description.random_weights and model.description.causal == causal
    assert model.description.stacks[0].n_layer == model.n_layer == 2

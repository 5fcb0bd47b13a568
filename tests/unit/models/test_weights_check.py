"""The trained-or-random verdict from its numbers (attnviz.models.weights_check): the thresholds against ln V, the
normalisation weights as initialised, the attention spread, and how a generation that wrote no text is named."""

import math
from types import SimpleNamespace

import pytest
import torch

from attnviz.core.capture import capture_weights
from attnviz.core.masks import KeyRanges
from attnviz.models.registry import SourceSpec, open_source
from attnviz.models.weights_check import (
    RANDOM_LOSS,
    TRAINED_LOSS,
    WeightsVerdict,
    from_attention,
    from_logits,
    generation_note,
    norms_at_init,
    weights_check,
)
from tests.tolerances import derived_bound

V, T = 1000, 12
TARGETS = torch.arange(T) % V


def test_uniform_predictions_score_exactly_ln_v_and_look_random():
    check = from_logits(torch.zeros(T, V), TARGETS, "next_token", norms=None)
    bound = derived_bound("float32", math.log(V), V)
    assert check.loss == pytest.approx(math.log(V), abs=bound) and check.uniform == math.log(V)
    assert check.entropy == pytest.approx(math.log(V), abs=bound)
    assert check.verdict is WeightsVerdict.LOOKS_RANDOM and check.looks_random


def test_a_model_that_predicts_the_text_is_trained():
    logits = torch.zeros(T, V)
    logits[torch.arange(T), TARGETS] = 10.0  # p(next) = e^10 / (e^10 + 999): a loss of about 0.04 nats
    check = from_logits(logits, TARGETS, "next_token", norms=False)
    assert check.loss < TRAINED_LOSS * math.log(V) and check.verdict is WeightsVerdict.TRAINED


@pytest.mark.parametrize(("fraction", "verdict"), [(0.70, "trained"), (0.85, "not determined"), (1.0, "looks random")])
def test_the_loss_is_read_against_fractions_of_ln_v(fraction, verdict):
    """Logits that give the next token log-probability -fraction·ln V at every position, the rest uniform."""
    target_logp = -fraction * math.log(V)
    rest = math.log((1 - math.exp(target_logp)) / (V - 1))  # the other V - 1 tokens share what is left
    logits = torch.full((T, V), rest, dtype=torch.float64)
    logits[torch.arange(T), TARGETS] = target_logp
    check = from_logits(logits, TARGETS, "next_token", norms=None)
    assert check.loss == pytest.approx(fraction * math.log(V), rel=1e-6)
    assert check.verdict.value == verdict
    assert TRAINED_LOSS < 0.85 < RANDOM_LOSS


def test_confidently_wrong_is_random_only_when_the_norms_are_as_initialised():
    logits = torch.zeros(T, V)
    logits[:, 7] = 30.0  # every position sure of token 7, which never comes: a loss far above ln V, entropy near 0
    targets = TARGETS + 8
    assert from_logits(logits, targets, "target", norms=False).verdict is WeightsVerdict.NOT_DETERMINED
    assert from_logits(logits, targets, "target", norms=True).verdict is WeightsVerdict.LOOKS_RANDOM


def test_normalisation_weights_as_initialised():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 2))
    assert norms_at_init(model) is True
    with torch.no_grad():
        model[1].weight[0] = 1.5
    assert norms_at_init(model) is False
    assert norms_at_init(torch.nn.Sequential(torch.nn.Linear(4, 4))) is None  # nothing to read


def attention_record(weights: torch.Tensor) -> SimpleNamespace:
    """A one-layer record of full weights (n_head, T, T) over every key."""
    capture = capture_weights(weights, KeyRanges.full(weights.shape[-1]), bin_size=1, scale=1.0)
    return SimpleNamespace(layers=[capture], q_len=weights.shape[-2])


def test_attention_uniform_in_every_head_looks_random_and_a_peaked_head_is_trained():
    uniform = torch.full((2, 6, 6), 1 / 6)
    check = from_attention(attention_record(uniform), norms=None)
    assert check.sharpest == pytest.approx(1.0, abs=derived_bound("float32", math.log(6), 6))
    assert check.verdict is WeightsVerdict.LOOKS_RANDOM and check.basis == "attention"
    peaked = uniform.clone()
    peaked[1] = torch.eye(6) * 0.99 + 0.01 / 6  # head 1 on its own token
    check = from_attention(attention_record(peaked), norms=False)
    assert check.sharpest < 0.1 and check.verdict is WeightsVerdict.TRAINED


def test_the_embedded_model_says_its_weights_are_random():
    check = weights_check(open_source(SourceSpec("default")))
    assert check.verdict is WeightsVerdict.LOOKS_RANDOM and check.basis == "declared"
    assert "seeded random" in str(check.note)


def test_a_generation_that_wrote_no_text_is_named():
    assert generation_note([5, 9, 11], "a cat sat", "a") is None
    assert generation_note([5, 5], "aa", "a") is None  # two of a kind is not yet a repetition
    assert str(generation_note([7] * 16, "so so so", "so")) == "**The model repeated one token 16 times**: so."
    said = str(generation_note([101] * 16, "", "[CLS]"))
    assert "repeated one token 16 times" in said and "[CLS], a special token, so no text" in said
    said = str(generation_note([101, 102], "", "[CLS]"))
    assert said.startswith("**The model wrote nothing**: 2 tokens") and "[CLS]" in said

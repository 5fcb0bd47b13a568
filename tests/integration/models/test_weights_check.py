"""Whether a checkpoint's weights look trained, measured at load on the bundled models, random copies of them built
from their configs, random encoder-decoders and a tiny model trained for a few steps (attnviz.models.weights_check).

The verdicts read the numbers against ln V (the uniform loss) with the module's thresholds: trained at a loss of at
most 0.75 ln V, random at 0.95 ln V or more; an encoder with no LM head by its sharpest head's attention entropy
(trained at most 0.5 of uniform, random at least 0.9)."""

import dataclasses
import math

import pytest
import torch
from transformers import AutoModel, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from attnviz.models.hf.loading import load_hf_source
from attnviz.models.weights_check import (
    RANDOM_ATTENTION,
    RANDOM_LOSS,
    TRAINED_ATTENTION,
    TRAINED_LOSS,
    WeightsVerdict,
    weights_check,
)
from tests.integration.tiny_models import tiny, tiny_seq2seq

# a short English text of the reference text's kind (not the reference text itself) that a tiny model learns from
TRAINING_TEXT = "The bird sat on the tree. The fox sat on the log. One, two, three, four, five, six, seven, eight. "


def test_smollm2_is_trained_and_its_check_is_kept_with_the_source(smollm2):
    check = weights_check(smollm2)
    assert check.basis == "next_token" and check.uniform == pytest.approx(math.log(smollm2.config.vocab_size))
    assert check.loss < TRAINED_LOSS * check.uniform and check.verdict is WeightsVerdict.TRAINED
    assert check.norms_at_init is False
    assert weights_check(smollm2) is check  # measured once per loaded model


def test_a_random_copy_of_smollm2_looks_random(smollm2):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(smollm2.config).eval().requires_grad_(False)
    check = weights_check(dataclasses.replace(smollm2, model=model))
    assert check.loss >= RANDOM_LOSS * check.uniform and check.entropy >= 0.9 * check.uniform
    assert check.norms_at_init is True and check.verdict is WeightsVerdict.LOOKS_RANDOM


def test_minilm_is_trained_by_its_attention_and_a_random_copy_is_not(minilm, tmp_path):
    check = weights_check(minilm)  # an encoder without an LM head: its heads' spread
    assert check.basis == "attention" and check.sharpest <= TRAINED_ATTENTION
    assert check.verdict is WeightsVerdict.TRAINED
    torch.manual_seed(0)
    AutoModel.from_config(minilm.config).save_pretrained(tmp_path)  # a user's random folder
    minilm.tokenizer.save_pretrained(tmp_path)
    random = weights_check(load_hf_source(str(tmp_path)))
    assert random.basis == "attention" and random.sharpest >= RANDOM_ATTENTION and random.norms_at_init is True
    assert random.verdict is WeightsVerdict.LOOKS_RANDOM


@pytest.mark.parametrize("factor", [1.0, 3.0])
def test_a_random_t5_looks_random(tmp_path, factor):
    """At T5's own initialisation (factor 1) its predictions are near uniform; at factor 3 (the suite's tiny T5,
    whose heads are not uniform) they are confidently wrong, a loss of several ln V, and its norms tell."""
    source = load_hf_source(str(tiny_seq2seq(tmp_path, "t5", initializer_factor=factor)))
    check = weights_check(source)
    assert check.basis == "target" and check.loss >= RANDOM_LOSS * check.uniform
    assert check.norms_at_init is True and check.verdict is WeightsVerdict.LOOKS_RANDOM


def test_a_tiny_model_trained_for_a_few_steps_reads_trained(smollm2, tmp_path):
    folder = tiny(tmp_path / "tiny", smollm2, LlamaConfig, LlamaForCausalLM)
    before = weights_check(load_hf_source(str(folder)))
    assert before.verdict is WeightsVerdict.LOOKS_RANDOM
    model = LlamaForCausalLM.from_pretrained(folder).train()
    ids = torch.tensor([smollm2.tokenizer(TRAINING_TEXT * 3)["input_ids"]])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    torch.manual_seed(0)
    for _ in range(40):
        loss = model(input_ids=ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(tmp_path / "trained")
    smollm2.tokenizer.save_pretrained(tmp_path / "trained")
    after = weights_check(load_hf_source(str(tmp_path / "trained")))
    assert after.loss <= TRAINED_LOSS * after.uniform and after.verdict is WeightsVerdict.TRAINED
    assert after.norms_at_init is False

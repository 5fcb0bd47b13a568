"""A transformers model lent from memory (``attnviz.models.registry.borrowed_source``) reads as the same model loaded
from its folder, and goes back exactly as it was: outputs bit for bit, attention implementation, training mode,
``requires_grad``, no hook and no wrapped forward left, even when the block raises.

Every comparison with the loaded model is exact: both run attnviz's attention on the same weights in the same
dtype (one arithmetic), so the statistics are equal, not close.
"""

import pandas as pd
import pytest
import torch

from attnviz.errors import ModelUnavailableError
from attnviz.models.hf.loading import load_hf_source
from attnviz.models.registry import borrowed_source
from tests.integration.tiny_models import tiny, tiny_seq2seq

TEXT = "The cat sat on the mat because it was tired, and the dog slept by the door."


def snapshot(model: torch.nn.Module) -> dict:
    """Everything a lending could leave behind on ``model``, read from its modules and configs."""
    modules = list(model.modules())
    return {
        "hooks": [
            (len(m._forward_hooks), len(m._forward_pre_hooks), len(getattr(m, "_forward_hooks_with_kwargs", {})))
            for m in modules
        ],
        "forwards": [m.__dict__.get("forward") for m in modules],
        "attrs": sorted({k for m in modules for k in m.__dict__ if k.startswith("_attnviz")}),
        "training": [m.training for m in modules],
        "grads": [p.requires_grad for p in model.parameters()],
        "implementation": model.config._attn_implementation,
    }


def outputs(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        was = model.training
        model.eval()
        out = model(input_ids=ids)
        model.train(was)
    return (out.logits if hasattr(out, "logits") else out.last_hidden_state).clone()


@pytest.fixture(scope="module")
def llama_folder(smollm2, tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    return tiny(tmp_path_factory.mktemp("llama"), smollm2, LlamaConfig, LlamaForCausalLM)


@pytest.fixture(scope="module")
def gpt2_folder(smollm2, tmp_path_factory):
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = tmp_path_factory.mktemp("gpt2")
    torch.manual_seed(0)
    GPT2LMHeadModel(
        GPT2Config(vocab_size=smollm2.config.vocab_size, n_embd=64, n_layer=2, n_head=4, n_positions=256)
    ).save_pretrained(folder)
    smollm2.tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def bloom_folder(smollm2, tmp_path_factory):
    """BLOOM: its attention runs only its own eager code (the eager route)."""
    from transformers import BloomConfig, BloomForCausalLM

    folder = tmp_path_factory.mktemp("bloom")
    torch.manual_seed(0)
    BloomForCausalLM(
        BloomConfig(vocab_size=smollm2.config.vocab_size, hidden_size=64, n_layer=2, n_head=4)
    ).save_pretrained(folder)
    smollm2.tokenizer.save_pretrained(folder)
    return folder


def user_model(folder, auto="causal", **kwargs):
    """The model as a notebook's user has it: transformers' default attention (sdpa), in training mode."""
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    loader = AutoModelForCausalLM if auto == "causal" else AutoModelForSeq2SeqLM
    model = loader.from_pretrained(folder, **kwargs)
    model.train()
    return model, AutoTokenizer.from_pretrained(folder)


@pytest.mark.parametrize("family", ["llama", "gpt2", "bloom"])
def test_lent_model_reads_as_loaded_and_goes_back_as_it_was(family, request):
    folder = request.getfixturevalue(f"{family}_folder")
    model, tokenizer = user_model(folder)
    ids = tokenizer(TEXT, return_tensors="pt").input_ids
    before, state = outputs(model, ids), snapshot(model)
    loaded = load_hf_source(str(folder))
    with borrowed_source(model, tokenizer) as source:
        assert source.route == loaded.route
        assert source.causal == loaded.causal
        assert source.capabilities == loaded.capabilities
        lent = source.run(TEXT, 64)
        expected = loaded.run(TEXT, 64)
        assert [t.text for t in lent.tokens] == [t.text for t in expected.tokens]
        pd.testing.assert_frame_equal(lent.statistics, expected.statistics, check_exact=True)
        for layer in range(lent.n_layer):
            assert torch.equal(lent.weights(layer, None), expected.weights(layer, None))
        assert model.training is False  # eval inside the block
    assert snapshot(model) == state
    assert state["implementation"] == ("eager" if family == "bloom" else "sdpa")
    assert torch.equal(outputs(model, ids), before)


def test_a_lab_with_gradients_leaves_no_gradient_on_the_weights(llama_folder):
    """Attribution patching differentiates z: the user's weights (requires_grad True) gain no .grad."""
    model, tokenizer = user_model(llama_folder)
    assert all(p.requires_grad for p in model.parameters())
    with borrowed_source(model, tokenizer) as source:
        ids = torch.tensor([source.encode(TEXT, 32).ids], device=source.device)
        seen = []
        result = source.run_hooked(ids, {"attn.z": lambda layer, z: seen.append(layer) or z})
        assert seen == list(range(source.n_layer)) and result.output.logits.shape[1] == ids.shape[1]
    assert all(p.grad is None for p in model.parameters())
    assert all(p.requires_grad for p in model.parameters())


def test_the_model_goes_back_when_the_block_raises(llama_folder):
    model, tokenizer = user_model(llama_folder)
    ids = tokenizer(TEXT, return_tensors="pt").input_ids
    before, state = outputs(model, ids), snapshot(model)
    with pytest.raises(RuntimeError, match="inside"), borrowed_source(model, tokenizer) as source:
        source.run(TEXT, 16)
        raise RuntimeError("inside")
    assert snapshot(model) == state
    assert torch.equal(outputs(model, ids), before)


def test_lent_twice_reads_the_same(llama_folder):
    model, tokenizer = user_model(llama_folder)
    runs = []
    for _ in range(2):
        with borrowed_source(model, tokenizer) as source:
            runs.append(source.run(TEXT, 64).statistics)
    pd.testing.assert_frame_equal(runs[0], runs[1], check_exact=True)


def test_bfloat16_on_a_device_map_keeps_accelerates_hooks(llama_folder, tmp_path):
    """A bfloat16 model placed by a device map (its second layer offloaded to disk) carries accelerate's hooks and
    forwards: they stay, attnviz's go."""
    where = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.layers.0": "cpu"}
    where |= {"model.layers.1": "disk", "model.norm": "cpu", "lm_head": "cpu"}
    model, tokenizer = user_model(llama_folder, dtype=torch.bfloat16, device_map=where, offload_folder=str(tmp_path))
    ids = tokenizer(TEXT, return_tensors="pt").input_ids
    assert any("_hf_hook" in m.__dict__ for m in model.modules())
    before, state = outputs(model, ids), snapshot(model)
    loaded = load_hf_source(str(llama_folder), placement=_bfloat16())
    with borrowed_source(model, tokenizer) as source:
        assert source.dtype == torch.bfloat16
        lent = source.run(TEXT, 64)
        pd.testing.assert_frame_equal(lent.statistics, loaded.run(TEXT, 64).statistics, check_exact=True)
    assert snapshot(model) == state
    assert torch.equal(outputs(model, ids), before)


def _bfloat16():
    from attnviz.core.devices import Placement

    return Placement("bfloat16")


def test_an_encoder_decoder_reads_as_loaded(tmp_path):
    folder = tiny_seq2seq(tmp_path / "bart", "bart")
    model, tokenizer = user_model(folder, auto="seq2seq")
    ids = tokenizer(TEXT, return_tensors="pt").input_ids
    model.eval()  # its dropout off for the comparison, then back in training mode as the user left it
    with torch.no_grad():
        before = model(input_ids=ids, decoder_input_ids=ids[:, :4]).logits.clone()
    model.train()
    state = snapshot(model)
    loaded = load_hf_source(str(folder))
    with borrowed_source(model, tokenizer) as source:
        lent = source.run_pair(TEXT, "A cat.", 64)
        expected = loaded.run_pair(TEXT, "A cat.", 64)
        for kind in ("encoder", "decoder", "cross"):
            pd.testing.assert_frame_equal(lent.part(kind).statistics, expected.part(kind).statistics, check_exact=True)
    assert snapshot(model) == state
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids, decoder_input_ids=ids[:, :4]).logits, before)


@pytest.mark.parametrize(
    ("model", "tokenizer", "says"),
    [
        ("not a model", None, "not a str"),
        (torch.nn.Linear(2, 2), None, "not a Linear"),
    ],
)
def test_what_cannot_be_lent_says_why_in_one_line(model, tokenizer, says):
    with pytest.raises(ModelUnavailableError) as caught, borrowed_source(model, tokenizer):
        pass
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_a_tokenizer_is_required(llama_folder):
    model, _ = user_model(llama_folder)
    with pytest.raises(ModelUnavailableError, match="tokenizer, not a str") as caught, borrowed_source(model, "tok"):
        pass
    assert "\n" not in str(caught.value)

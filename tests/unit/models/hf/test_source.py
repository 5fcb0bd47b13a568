"""A Hugging Face decoder as a source: its capture equals its own eager attention, and its cache and decoding agree.

The model is a tiny random Llama built in memory (no file, no download) with a word-level tokenizer built the
same way: what the source does with any transformers decoder, fast enough for the unit tier. The bundled
models and saved folders of other families run through the same class in tests/integration.
"""

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from attnviz.models.hf.attention import IMPLEMENTATION, register
from attnviz.models.hf.source import HFSource
from attnviz.models.source import KV_CACHES, Rotates
from tests.tolerances import bound

WORDS = [
    "<s>",
    "</s>",
    "<unk>",
    *["the", "cat", "sat", "on", "a", "mat", "because", "it", "was", "tired", "and", "then", "slept"],
]
TEXT = "the cat sat on a mat because it was tired"
TOL = bound("attention")


@pytest.fixture(scope="module")
def source() -> HFSource:
    register()
    word = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    word.pre_tokenizer = pre_tokenizers.Whitespace()
    word.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=word, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    config = LlamaConfig(
        vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, bos_token_id=0, eos_token_id=1,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM._from_config(config, attn_implementation=IMPLEMENTATION).eval().requires_grad_(False)
    return HFSource("tiny llama", "tiny", model, tokenizer, "cpu", causal=True, can_generate=True)


def test_the_shape_and_what_it_can_do_come_from_the_loaded_model(source):
    assert (source.n_layer, source.n_head, source.n_kv_head, source.head_dim, source.d_model) == (2, 4, 2, 8, 32)
    assert source.causal and source.can_generate and source.supports_parity and not source.random_weights
    assert "LlamaAttention" in source.implementation and source.max_positions == 64


def test_it_tells_its_rope_and_its_parity_bugs_through_the_interface(source):
    assert isinstance(source, Rotates)
    found = source.rope_frequencies(source.head_dim)  # the model's own rotary embedding, as its layers apply it
    assert found.theta is None and torch.equal(found.inv_freq, source.model.model.rotary_emb.inv_freq.float())
    other = source.rope_frequencies(6)  # no buffer of that width: Llama's rule on the config's theta
    assert other.theta == 10000.0 and other.inv_freq.shape == (3,)
    bugs = source.parity_bugs()  # GQA Llama: every bug; each a message in English for the CLI, in any language
    assert list(bugs) == ["sqrt_dmodel", "no_scale", "no_rope", "kv_tiled"]
    assert str(bugs["no_scale"]) == "no scale at all" and bugs["no_scale"].render("zh") == "完全不缩放"


def test_the_capture_equals_the_models_own_eager_attention_in_every_head(source):
    record = source.run(TEXT, 64)
    eager = source.reference_weights(TEXT, 64)  # (n_layer, n_head, T, T)
    assert record.q_len == len(TEXT.split()) + 1 and str(record.mask_summary()) == "causal"
    for layer in range(2):
        for head in range(4):
            assert (record.weights(layer, head) - eager[layer, head]).abs().max().item() <= TOL, (layer, head)


def test_a_cut_text_keeps_its_special_token_and_the_end_when_asked(source):
    start, end = source.encode(TEXT, 4), source.encode(TEXT, 4, keep="end")
    assert [t.text for t in start.tokens] == ["<s>", "the", "cat", "sat"] and start.n_input == 11
    assert [t.text for t in end.tokens] == ["<s>", "it", "was", "tired"]


@pytest.mark.parametrize("implementation", KV_CACHES)
def test_both_caches_hold_every_layers_keys_for_every_token(source, implementation):
    cached = source.prefill_kv(TEXT, 9, batch=2, implementation=implementation)
    assert cached.implementation == implementation and len(cached.layers) == 2
    assert all(k.shape == v.shape == (2, 2, 9, 8) for k, v in cached.layers)  # (B, n_kv_head, T, head_dim)


def test_decoding_with_the_cache_gives_the_tokens_recomputing_gives(source):
    with_cache, without = source.greedy_decoder("the cat", True), source.greedy_decoder("the cat", False)
    tokens = [with_cache.step() for _ in range(5)]
    assert tokens == [without.step() for _ in range(5)] and with_cache.n_prompt == 3
    without.seek(tokens[:3])
    assert without.step() == tokens[3]
    generation = source.generate("the cat", 4, 64)
    assert generation.generated_ids == tokens[: len(generation.generated_ids)] and generation.n_prompt == 3

"""The embedded default model: deterministic, exact captures, honest config errors."""

import pytest
import torch

from attnviz.errors import GenerationUnsupportedError, ParityUnsupportedError
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel, sinusoidal_positions, token_embedding
from attnviz.models.source import AttentionSource


def all_weights(record):
    return torch.stack(
        [torch.stack([record.weights(layer, h) for h in range(record.n_head)]) for layer in range(record.n_layer)]
    )


def test_same_seed_same_attention_other_seed_differs():
    text = "the cat saw the dog"
    a = EmbeddedModel(EmbeddedConfig(seed=1)).run(text, 64)
    b = EmbeddedModel(EmbeddedConfig(seed=1)).run(text, 64)
    c = EmbeddedModel(EmbeddedConfig(seed=2)).run(text, 64)
    assert torch.equal(all_weights(a), all_weights(b))
    assert not torch.allclose(all_weights(a), all_weights(c))


def test_record_shapes_rows_and_causal_triangle():
    cfg = EmbeddedConfig(d_model=32, n_head=4, n_kv_head=2, n_layer=3, causal=True)
    rec = EmbeddedModel(cfg).run("one two three four five", 64)
    w = all_weights(rec)
    assert w.shape == (3, 4, 5, 5)
    assert rec.n_kv_head == 2 and rec.causal and str(rec.mask_summary()) == "causal"
    assert torch.allclose(w.sum(-1), torch.ones(3, 4, 5))
    assert w.triu(diagonal=1).abs().max().item() == 0.0
    layer = rec.layers[0]
    assert layer.q.shape == (4, 5, 8) and layer.k.shape == (2, 5, 8)
    # the kept q and k really are what produced layer 0's weights
    q, k = layer.q, layer.k.repeat_interleave(2, dim=0)
    scores = (q @ k.transpose(-1, -2)) / 8**0.5 + torch.full((5, 5), float("-inf")).triu(1)
    assert (scores.softmax(-1) - w[0]).abs().max().item() < 1e-5


@pytest.mark.parametrize("causal", [False, True])
def test_capture_equals_the_inspectable_path(causal):
    model = EmbeddedModel(EmbeddedConfig(d_model=48, n_head=6, n_kv_head=3, n_layer=2, causal=causal))
    text = "the cat sat on the mat and the dog barked at the cat 猫 坐 在 垫子 上"
    record = model.run(text, 64)
    assert (all_weights(record) - model.reference_weights(text, 64)).abs().max().item() <= 1e-5


def test_truncation_is_recorded():
    rec = EmbeddedModel(EmbeddedConfig()).run("a b c d e f", 4)
    assert [t.text for t in rec.tokens] == ["a", "b", "c", "d"]
    assert rec.truncated and rec.n_input_tokens == 6
    assert [t.text for t in EmbeddedModel(EmbeddedConfig()).encode("a b c d e f", 2, keep="end").tokens] == ["e", "f"]


def test_same_token_same_embedding_and_positions():
    assert torch.equal(token_embedding("cat", 16, 0), token_embedding("cat", 16, 0))
    assert not torch.equal(token_embedding("cat", 16, 0), token_embedding("cat", 16, 1))
    pe = sinusoidal_positions(3, 4)
    assert torch.allclose(pe[0], torch.tensor([0.0, 1.0, 0.0, 1.0]))
    assert pe[1, 0].item() == pytest.approx(torch.sin(torch.tensor(1.0)).item())


def test_empty_text_gives_empty_record():
    rec = EmbeddedModel(EmbeddedConfig()).run("   ", 16)
    assert rec.tokens == [] and rec.q_len == 0 and rec.n_layer == 2


def test_models_built_at_once_in_threads_match_their_seeds():
    from concurrent.futures import ThreadPoolExecutor

    def total(seed):
        return sum(p.sum().item() for p in EmbeddedModel(EmbeddedConfig(seed=seed)).parameters())

    alone = {seed: total(seed) for seed in (1, 2)}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for _ in range(3):
            assert list(pool.map(total, [1, 2, 1, 2])) == [alone[1], alone[2], alone[1], alone[2]]


def test_it_is_a_source_that_says_what_it_cannot_do():
    model = EmbeddedModel(EmbeddedConfig(n_kv_head=2))
    assert isinstance(model, AttentionSource)
    assert (model.n_layer, model.n_head, model.n_kv_head, model.head_dim, model.d_model) == (2, 4, 2, 16, 64)
    assert model.random_weights and not model.can_generate and not model.supports_parity
    with pytest.raises(GenerationUnsupportedError, match="no language-model head"):
        model.generate("hi", 3, 16)
    with pytest.raises(ParityUnsupportedError, match="attnviz's own attention"):
        model.check_parity("hi", 16)


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("causal", [False, True])
def test_padded_batch_keeps_pads_out_and_real_rows_unchanged(side, causal):
    model = EmbeddedModel(EmbeddedConfig(causal=causal))
    texts = ["the cat sat on the mat", "dogs bark", "注意力机制"]
    batch = model.run_batch(texts, 32, side=side)
    assert batch.pad_key_weight == 0.0
    for text, record, real in zip(texts, batch.records, batch.key_mask, strict=True):
        alone = all_weights(model.run(text, 32))
        at = real.nonzero()[:, 0]
        span = (int(at[0]), int(at[-1]) + 1)
        ours = torch.stack([record.weights(layer, h, span, span) for layer in range(2) for h in range(4)]).view(
            alone.shape
        )
        assert (ours - alone).abs().max().item() <= 1e-5

"""The embedded default model: deterministic, valid attention, honest config errors."""

import pytest
import torch

from attnviz.embedded import EmbeddedConfig, EmbeddedModel, sinusoidal_positions, token_embedding


def test_same_seed_same_attention_other_seed_differs():
    text = "the cat saw the dog"
    a = EmbeddedModel(EmbeddedConfig(seed=1)).run(text, 64)
    b = EmbeddedModel(EmbeddedConfig(seed=1)).run(text, 64)
    c = EmbeddedModel(EmbeddedConfig(seed=2)).run(text, 64)
    assert torch.equal(a.attention, b.attention)
    assert not torch.allclose(a.attention, c.attention)


def test_record_shapes_rows_and_causal_triangle():
    cfg = EmbeddedConfig(d_model=32, n_head=4, n_kv_head=2, n_layer=3, causal=True)
    rec = EmbeddedModel(cfg).run("one two three four five", 64, with_qkv=True)
    assert rec.attention.shape == (3, 4, 5, 5)
    assert rec.n_kv_head == 2 and rec.causal
    assert torch.allclose(rec.attention.sum(-1), torch.ones(3, 4, 5))
    assert rec.attention.triu(diagonal=1).abs().max().item() == 0.0
    assert len(rec.qkv) == 3 and rec.qkv[0].q.shape == (4, 5, 8) and rec.qkv[0].k.shape == (2, 5, 8)
    # the recorded q and k really are what produced layer 0's weights
    q, k = rec.qkv[0].q, rec.qkv[0].k.repeat_interleave(2, dim=0)
    scores = (q @ k.transpose(-1, -2)) / 8**0.5 + torch.full((5, 5), float("-inf")).triu(1)
    assert (scores.softmax(-1) - rec.attention[0]).abs().max().item() < 1e-5


def test_truncation_is_recorded():
    rec = EmbeddedModel(EmbeddedConfig()).run("a b c d e f", 4)
    assert [t.text for t in rec.tokens] == ["a", "b", "c", "d"]
    assert rec.truncated and rec.n_input_tokens == 6


def test_same_token_same_embedding_and_positions():
    assert torch.equal(token_embedding("cat", 16, 0), token_embedding("cat", 16, 0))
    assert not torch.equal(token_embedding("cat", 16, 0), token_embedding("cat", 16, 1))
    pe = sinusoidal_positions(3, 4)
    assert torch.allclose(pe[0], torch.tensor([0.0, 1.0, 0.0, 1.0]))
    assert pe[1, 0].item() == pytest.approx(torch.sin(torch.tensor(1.0)).item())


def test_empty_text_gives_empty_record():
    rec = EmbeddedModel(EmbeddedConfig()).run("   ", 16)
    assert rec.tokens == [] and rec.attention.shape == (2, 4, 0, 0)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"d_model": 10, "n_head": 3}, r"d_model \(10\) must be divisible by n_head \(3\)"),
        ({"n_head": 4, "n_kv_head": 3}, r"n_head \(4\) must be a positive multiple of n_kv_head \(3\)"),
        ({"d_model": 7, "n_head": 7}, r"d_model \(7\) must be an even number"),
        ({"n_layer": 0}, r"n_layer \(0\)"),
    ],
)
def test_invalid_configs(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EmbeddedConfig(**kwargs)


def test_models_built_at_once_in_threads_match_their_seeds():
    from concurrent.futures import ThreadPoolExecutor

    def total(seed):
        return sum(p.sum().item() for p in EmbeddedModel(EmbeddedConfig(seed=seed)).parameters())

    alone = {seed: total(seed) for seed in (1, 2)}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for _ in range(3):
            assert list(pool.map(total, [1, 2, 1, 2])) == [alone[1], alone[2], alone[1], alone[2]]

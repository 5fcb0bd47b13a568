"""The record every page reads: any head back at full resolution, its masks said per layer, labels that fit."""

import pytest
import torch

from attnviz.core.capture import capture_attention
from attnviz.core.masks import KeyRanges
from attnviz.core.tokenizer import Token
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.record import LABEL_CHARS, AttentionRecord, GenerationRecord, Parity, cut_tokens, token_labels
from attnviz.models.registry import EMBEDDED, SourceSpec, open_source
from tests.tolerances import bound, derived_bound


@pytest.fixture(scope="module")
def source():
    return open_source(SourceSpec(EMBEDDED, config=EmbeddedConfig(d_model=16, n_head=2, n_layer=2, causal=True)))


def record_with(keys: list[KeyRanges]) -> AttentionRecord:
    """A record whose layer l applied the mask keys[l] (one head, random q and k)."""
    n = keys[0].q_len
    g = torch.Generator().manual_seed(0)
    layers = []
    for mask in keys:
        q, k, v = (torch.randn(1, n, 4, generator=g) for _ in range(3))
        layers.append(capture_attention(q, k, v, mask, scale=0.5, bin_size=1, keep_qk=True)[1])
    tokens = [Token(f"t{i}", i, i + 1) for i in range(n)]
    return AttentionRecord("hand-made", tokens, layers, 1, True, "test", n)


def test_any_head_comes_back_at_full_resolution_rows_summing_to_one_and_nothing_where_masked(source):
    record = source.run("the cat sat on the mat", 64)
    for layer in range(2):
        weights = record.weights(layer, 1)  # (T, T)
        # a float32 softmax row of q_len keys summed again, against 1
        assert torch.allclose(
            weights.sum(-1), torch.ones(record.q_len), atol=derived_bound("float32", 1.0, 2 * record.q_len), rtol=0
        )
        assert (weights[~record.mask(layer)] == 0).all() and weights.triu(1).abs().max() == 0
    mean = record.weights(0, "mean")
    # the heads recomputed together against each alone: two routes (tests/tolerances.py)
    assert torch.allclose(mean, (record.weights(0, 0) + record.weights(0, 1)) / 2, atol=bound("attention"), rtol=0)
    window = record.weights(1, 0, (2, 5), (0, 3))
    assert torch.equal(window, record.weights(1, 0)[2:5, 0:3])
    assert record.full_view and record.nbytes > 0 and len(record.statistics) == 4


def test_the_masks_are_said_once_when_every_layer_shares_one_and_layer_by_layer_when_not():
    same = record_with([KeyRanges.causal(6), KeyRanges.causal(6)])
    assert str(same.mask_summary()) == "causal"
    mixed = record_with([KeyRanges.causal(6, window=2), KeyRanges.causal(6, window=2), KeyRanges.causal(6)])
    assert str(mixed.mask_summary()) == "L0-L1: causal, sliding window of 2; L2: causal"
    assert mixed.mask_summary().render("zh").startswith("L0-L1: 因果掩码，滑动窗口 2; L2: ")


def test_labels_stay_unique_and_short_and_the_cut_ones_are_listed_whole():
    tokens = [Token("the", 0, 3), Token("the", 4, 7), Token("x" * 40, 8, 48)]
    labels = token_labels(tokens)
    assert labels[:2] == ["0 the", "1 the"] and labels[2] == "2 " + "x" * (LABEL_CHARS - 1) + "…"
    assert token_labels(tokens, limit=None)[2] == "2 " + "x" * 40 and cut_tokens(tokens) == [(2, "x" * 40)]


def test_generated_tokens_are_marked_and_the_prompt_is_what_was_read():
    record = record_with([KeyRanges.causal(5)])
    generation = GenerationRecord(record=record, n_prompt=3, n_prompt_input=7, generated_ids=[1, 2], text="t3 t4")
    assert generation.labels() == ["0 t0", "1 t1", "2 t2", "3 ✦t3", "4 ✦t4"]
    assert generation.prompt_text() == "t0 t1 t2" and generation.prompt_truncated


def test_parity_matches_only_within_the_tolerance():
    same = Parity(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2), torch.tensor([[1e-7]]), [KeyRanges.causal(2)])
    off = Parity(torch.zeros(1, 1, 2, 2), torch.ones(1, 1, 2, 2), torch.tensor([[0.5]]), [KeyRanges.causal(2)])
    assert same.matches and not off.matches and off.worst == 0.5 and [str(m) for m in same.masks] == ["causal"]

"""Logit parts add up to the score the capture computes: embedded model, a soft-capped RoPE record, SmolLM2."""

import math
from types import SimpleNamespace

import pytest
import torch

from attnviz.core.capture import head_scores
from attnviz.core.rope import rope_inverse_frequencies
from attnviz.labs.logit_parts import (
    band_summary,
    logit_parts,
    pair_parts,
    position_vs_content,
    rope_frequencies,
    top_parts,
)
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.models.source import RotaryFrequencies, Rotates
from tests.tolerances import derived_bound
from tests.unit.labs.rope_records import rope_record

TEXT = "the cat sat on the mat because it was tired"

# the parts' float64 sum against the capture's float32 score (or the float32 parts summed again): a score of
# head_dim ≤ 16 products, scaled |q·k| ≤ 8 in these records, from two routes
ATOL = derived_bound("float32", 8.0, 16)


def share_tol(record) -> float:
    """position_vs_content against its value by hand: float64 sums over head_dim dimensions and T² cells."""
    return derived_bound("float64", 1.0, record.layers[0].q.shape[-1] + record.q_len**2)


@pytest.fixture(scope="module")
def embedded():
    return EmbeddedModel(EmbeddedConfig(d_model=32, n_head=4, n_kv_head=2, n_layer=2, causal=True)).run(TEXT, 64)


def test_parts_sum_to_the_captured_score_in_every_head(embedded):
    for layer in range(embedded.n_layer):
        capture = embedded.layers[layer]
        for head in range(embedded.n_head):
            for query, key in [(0, 0), (5, 2), (9, 9), (embedded.q_len - 1, 3)]:
                parts = logit_parts(embedded, layer, head, query, key)
                score = float(head_scores(capture, head, (query, query + 1), (key, key + 1))[0, 0])
                assert parts.per_dim.shape == (8,) and parts.per_pair.shape == (4,)
                assert abs(float(parts.per_dim.double().sum()) - score) < ATOL
                assert abs(float(parts.per_pair.double().sum()) - score) < ATOL
                assert abs(parts.logit - score) < ATOL and parts.capped_logit == parts.logit
                assert float(band_summary(parts)["contribution"].sum()) == pytest.approx(score, abs=ATOL)


def test_pairs_are_dimension_i_with_i_plus_half():
    per_dim = torch.arange(8.0)
    assert pair_parts(per_dim).tolist() == [4.0, 6.0, 8.0, 10.0]
    with pytest.raises(ValueError, match="even head_dim"):
        pair_parts(torch.ones(5))


def test_gqa_reads_the_k_head_of_its_group():
    record, _ = rope_record(n_head=4, n_kv_head=2)
    capture = record.layers[0]
    parts = logit_parts(record, 0, 3, 7, 2)  # query head 3 reads K head 1
    expected = (capture.q[3, 7] * capture.k[1, 2] * capture.scale).sum()
    assert parts.logit == pytest.approx(float(expected), abs=ATOL)


def test_soft_capped_parts_add_up_to_the_score_before_the_cap():
    record, inv_freq = rope_record(softcap=1.5)
    capture = record.layers[0]
    parts = logit_parts(record, 0, 1, 20, 4, inv_freq)
    capped = float(head_scores(capture, 1, (20, 21), (4, 5))[0, 0])
    assert parts.softcap == 1.5
    assert parts.capped_logit == pytest.approx(capped, abs=ATOL)
    assert parts.capped_logit == 1.5 * math.tanh(parts.logit / 1.5)  # the same float64 expression: exact
    assert float(parts.per_dim.double().sum()) == pytest.approx(parts.logit, abs=ATOL)


def test_bands_run_from_high_to_low_frequency_and_sum_to_the_logit():
    record, inv_freq = rope_record(head_dim=16)
    parts = logit_parts(record, 0, 0, 30, 10, inv_freq)
    bands = band_summary(parts, n_bins=4)
    assert len(bands) == 4 and bands["pairs"].tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert str(bands["band"][0]).startswith("band 1") and "rad/token" in str(bands["freq_range"][0])
    assert float(bands["contribution"].sum()) == pytest.approx(parts.logit, abs=ATOL)
    assert len(band_summary(parts, n_bins=100)) == 8  # at most one band per pair
    plain = band_summary(logit_parts(record, 0, 0, 30, 10))  # no frequencies: pairs in order, no range
    assert str(plain["band"][0]) == "pairs 0" and plain["freq_range"][0] == ""


class Rotating:
    """A source that can tell its RoPE (attnviz.models.source.Rotates), whatever its family."""

    def __init__(self, found):
        self.found, self.asked = found, []

    def rope_frequencies(self, head_dim):
        self.asked.append(head_dim)
        return self.found


def test_rope_frequencies_come_from_the_source_and_say_where_from():
    inv = torch.tensor([1.0, 0.1])
    own = Rotating(RotaryFrequencies(inv))
    found = rope_frequencies(own, 4)
    assert own.asked == [4] and found.rope and torch.equal(found.inv_freq, inv) and "own rotary" in str(found.source)
    by_theta = rope_frequencies(Rotating(RotaryFrequencies(rope_inverse_frequencies(8, 500.0), theta=500.0)), 8)
    assert torch.allclose(by_theta.inv_freq, rope_inverse_frequencies(8, 500.0)) and "500" in str(by_theta.source)
    assert not rope_frequencies(Rotating(None), 8).rope  # a source that can tell, and has none
    assert not rope_frequencies(SimpleNamespace(), 8).rope  # one that cannot tell: no RoPE, never a guess
    embedded = EmbeddedModel(EmbeddedConfig(d_model=32, n_head=4, n_layer=1))
    assert not isinstance(embedded, Rotates) and "no rotary" in str(rope_frequencies(embedded, 8).source)


def test_position_vs_content_is_one_for_a_head_made_of_fast_pairs_only():
    record, inv_freq = rope_record(head_dim=16)
    capture = record.layers[0]
    fast_only = capture.q.clone()
    fast_only[..., 2:8] = 0.0  # keep pairs 0-1 (dims 0, 1, 8, 9): the highest quarter of frequencies
    fast_only[..., 10:16] = 0.0
    record.layers[0].q = fast_only
    # the fast pairs' logits against all of them, whose other parts are 0: two float64 matmuls of other widths
    assert position_vs_content(record, 0, 0, inv_freq) == pytest.approx(1.0, abs=share_tol(record))
    slow_only = fast_only.clone()
    slow_only[..., [0, 1, 8, 9]] = 0.0
    slow_only[..., 4:8] = 1.0
    record.layers[0].q = slow_only
    assert position_vs_content(record, 0, 0, inv_freq) == 0.0  # every fast part is exactly 0: so is their sum


def test_position_vs_content_shares_add_up(embedded):
    inv_freq = rope_inverse_frequencies(8, 10000.0)
    fast = position_vs_content(embedded, 1, 2, inv_freq, n_bins=4, high_bins=1)
    rest = position_vs_content(embedded, 1, 2, inv_freq.flip(0), n_bins=4, high_bins=3)  # the other three pairs
    assert fast + rest == pytest.approx(1.0, abs=2 * share_tol(embedded))  # two shares, each from float64 sums


def test_top_parts_names_the_largest_dimensions(embedded):
    parts = logit_parts(embedded, 0, 1, 6, 2)
    top = top_parts(parts, 2)
    assert abs(top["contribution"][0]) >= abs(top["contribution"][1])
    assert abs(top["contribution"][0]) == float(parts.per_dim.abs().max())  # the same float32 value, widened: exact


def test_out_of_range_and_missing_qk_raise(embedded):
    with pytest.raises(ValueError, match="out of range"):
        logit_parts(embedded, 0, 9, 0, 0)
    with pytest.raises(ValueError, match="out of range"):
        logit_parts(embedded, 0, 0, 0, 999)
    no_qk = EmbeddedModel(EmbeddedConfig(d_model=32, n_head=4, n_layer=1)).run(TEXT, 64, keep_qk=False)
    with pytest.raises(ValueError, match="did not keep q and k"):
        logit_parts(no_qk, 0, 0, 0, 0)

"""Cross-attention's measures on hand-made heads, each value worked out on paper."""

import math

import pytest
import torch

from attnviz.core.alignment import alignment_offset, coverage, hard_alignment, monotonicity
from attnviz.core.capture.cross import capture_cross
from tests.tolerances import derived_bound


def one_hot(columns: list[int], n_source: int) -> torch.Tensor:
    """A head whose row i puts all its weight on source token columns[i]: (T, S)."""
    return torch.nn.functional.one_hot(torch.tensor(columns), n_source).float()


def test_monotonicity_of_diagonal_reversed_and_constant_heads():
    heads = torch.stack([one_hot([0, 1, 2, 3], 4), one_hot([3, 2, 1, 0], 4), one_hot([0, 0, 0, 0], 4)])
    assert monotonicity(heads).tolist() == pytest.approx([1.0, -1.0, 0.0])
    assert hard_alignment(heads)[1].tolist() == [3, 2, 1, 0]
    # the rows left out do not count: without row 3, [0, 0, 0] of the third head is still constant
    rows = torch.tensor([True, True, True, False])
    assert monotonicity(heads, rows).tolist() == pytest.approx([1.0, -1.0, 0.0])


def test_coverage_by_hand():
    # target 3 x source 4: source 0 gets 1 + 0.5 = 1.5 -> 1, source 1 gets 0.5, source 2 gets 1, source 3 nothing
    w = torch.tensor([[1.0, 0, 0, 0], [0.5, 0.5, 0, 0], [0, 0, 1.0, 0]])
    assert coverage(w[None], 4).tolist() == pytest.approx([(1 + 0.5 + 1 + 0) / 4])
    assert coverage(w[None], 3).tolist() == pytest.approx([(1 + 0.5 + 1) / 3])  # a pad source token left out


def test_alignment_offset_by_hand():
    # 2 targets over 4 sources: row 0 on source 0 (at 0.5/4 = .125, target at .25): .125; row 1 on source 3
    # (at 3.5/4 = .875, target at .75): .125
    w = one_hot([0, 3], 4)
    assert alignment_offset(w, 4).tolist() == pytest.approx([0.125, 0.125])
    assert alignment_offset(one_hot([0, 1], 2), 2).tolist() == pytest.approx([0.0, 0.0])  # on the diagonal


def test_cross_capture_keeps_only_the_statistics_that_mean_something():
    w = torch.softmax(torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0)), dim=-1)  # (n_head, T, S)
    w[..., 4] = 0.0  # a pad source token: weight 0
    w = w / w.sum(dim=-1, keepdim=True)
    capture = capture_cross(w, 4, bin_size=1, scale=1.0)
    assert set(capture.rows) == {"entropy", "max_weight", "first_token_weight", "alignment_offset", "lse"}
    assert torch.equal(capture.rows["max_weight"], w.amax(dim=-1))
    # two float32 routes to an entropy: terms |w·log w| ≤ 1/e over 5 keys, each route rounding its own
    entropy_routes = derived_bound("float32", 1.0, 2 * 5)
    assert torch.allclose(capture.rows["entropy"], -(w * w.clamp_min(1e-30).log()).sum(-1), atol=entropy_routes, rtol=0)
    assert torch.equal(capture.rows["first_token_weight"], w[..., 0])
    assert capture.keys.q_len == 3 and capture.keys.k_len == 5 and int(capture.keys.hi[0]) == 4
    assert capture.pooled_max.shape == (2, 3, 5) and math.isnan(float(capture.pooled_max[0, 0, 4]))

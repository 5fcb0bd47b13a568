"""Value-weighted attention (attnviz.core.value_norms): a hand-computed toy, then the capture against dense math."""

from __future__ import annotations

import math

import pytest
import torch

from attnviz.core.capture import capture_attention
from attnviz.core.masks import KeyRanges
from attnviz.core.value_norms import (
    LOW_NORM_STAT,
    low_norm_weight,
    projection_factors,
    small_keys,
    value_norms,
    value_weighted,
)
from tests.tolerances import bound, derived_bound

# Two heads, head_dim 2, d_model 2. W_O^0 is the identity (norm = ‖v‖); W_O^1 doubles x and drops y (norm = 2|x|).
BLOCKS = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[2.0, 0.0], [0.0, 0.0]]])  # (n_head, head_dim, d_model)
V = torch.tensor([[[3.0, 4.0], [0.0, 0.0], [1.0, 0.0]], [[1.0, 1.0], [0.0, 5.0], [-3.0, 0.0]]])  # (2, 3, 2)
ALPHA = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])  # one head's causal weights (3, 3)
# the toy in float32 against its values by hand: norms ≤ 6 through W_O's QR factor (head_dim 2 x d_model 2), then
# one product with a weight
BY_HAND = derived_bound("float32", 6.0, 2 * 2 + 1)


def test_hand_computed_norms_and_map():
    norms = value_norms(V, projection_factors(BLOCKS))
    # head 0: ‖(3,4)‖ = 5, ‖(0,0)‖ = 0, ‖(1,0)‖ = 1; head 1: 2·|1| = 2, 2·|0| = 0, 2·|-3| = 6
    torch.testing.assert_close(norms, torch.tensor([[5.0, 0.0, 1.0], [2.0, 0.0, 6.0]]), atol=BY_HAND, rtol=0)
    mapped = value_weighted(torch.stack([ALPHA, ALPHA]), norms)
    expected0 = torch.tensor([[5.0, 0.0, 0.0], [2.5, 0.0, 0.0], [1.0, 0.0, 0.5]])
    expected1 = torch.tensor([[2.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.4, 0.0, 3.0]])
    torch.testing.assert_close(mapped, torch.stack([expected0, expected1]), atol=BY_HAND, rtol=0)


def test_hand_computed_low_norm_share():
    norms = torch.tensor([[5.0, 0.0, 1.0], [2.0, 0.0, 6.0]])
    small = small_keys(norms)  # below 0.25 x median: head 0 median 1 -> < 0.25; head 1 median 2 -> < 0.5
    assert small.tolist() == [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]
    share = low_norm_weight(torch.stack([ALPHA, ALPHA]), small)
    torch.testing.assert_close(share, torch.tensor([[0.0, 0.5, 0.3], [0.0, 0.5, 0.3]]))


def test_gqa_heads_read_their_kv_head():
    torch.manual_seed(0)
    blocks = torch.randn(4, 8, 16)  # 4 query heads
    v = torch.randn(2, 5, 8)  # 2 kv heads: heads 0, 1 read kv 0; heads 2, 3 read kv 1
    norms = value_norms(v, projection_factors(blocks))
    direct = torch.stack([torch.linalg.vector_norm(v[h // 2] @ blocks[h], dim=-1) for h in range(4)])
    # the QR factor's route against v @ W_O: head_dim 8 products a component, 16 squares a norm
    tol = derived_bound("float32", float(direct.abs().max()), 8 + 16)
    torch.testing.assert_close(norms, direct, atol=tol, rtol=0)


def test_tiny_norms_keep_their_digits():
    """A value nearly in W_O's null space: a Gram form vᵀGv would lose it to rounding, the QR factor does not."""
    blocks = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1e-4, 0.0]]])  # (1, 2, 3)
    v = torch.tensor([[[0.0, 1.0], [1e-3, 0.0]]])
    # relative: a QR factor keeps each direction's digits, a few float32 roundings of 2 x 3 values
    rel = derived_bound("float32", 1.0, 2 * 3)
    torch.testing.assert_close(
        value_norms(v, projection_factors(blocks)), torch.tensor([[1e-4, 1e-3]]), rtol=rel, atol=0
    )


def test_shapes_that_do_not_fit_are_refused():
    with pytest.raises(ValueError):
        value_norms(torch.zeros(3, 4, 2), projection_factors(BLOCKS))  # 2 heads cannot share 3 kv heads
    with pytest.raises(ValueError):
        value_weighted(torch.zeros(2, 3), torch.zeros(4))
    with pytest.raises(ValueError):
        projection_factors(torch.zeros(2, 2))


@pytest.mark.parametrize("n_kv_head", [4, 2, 1])
@pytest.mark.parametrize("n_tokens", [1, 7, 300])
def test_capture_keeps_norms_and_the_share_of_dense_weights(n_kv_head, n_tokens):
    T = n_tokens
    torch.manual_seed(T)
    n_head, hd, d_model = 4, 8, 24
    q, k, v = torch.randn(n_head, T, hd), torch.randn(n_kv_head, T, hd), torch.randn(n_kv_head, T, hd)
    v[:, 0] *= 1e-3  # a near-empty first value: a sink's signature
    blocks = torch.randn(n_head, hd, d_model)
    keys = KeyRanges.causal(T)
    _, capture = capture_attention(q, k, v, keys, scale=hd**-0.5, bin_size=1, out_factors=projection_factors(blocks))
    n_rep = n_head // n_kv_head
    v_rep = v.repeat_interleave(n_rep, dim=0)  # (n_head, T, hd)
    direct = torch.linalg.vector_norm(torch.einsum("htd,hdm->htm", v_rep, blocks), dim=-1)  # (n_head, T)
    # the QR factor's route against v @ W_O: hd products a component, d_model squares a norm
    tol = derived_bound("float32", float(direct.abs().max()), hd + d_model)
    torch.testing.assert_close(capture.value_norms, direct, atol=tol, rtol=0)
    scores = torch.einsum("hid,hjd->hij", q, k.repeat_interleave(n_rep, dim=0)) * hd**-0.5
    weights = scores.masked_fill(~keys.dense(), -math.inf).softmax(-1)  # (n_head, T, T)
    median = direct.median(dim=-1, keepdim=True).values
    share = (weights * (direct < 0.25 * median)[:, None, :]).sum(-1)
    share_routes = bound("row_statistics")  # a share of a row's weights from two routes (tests/tolerances.py)
    torch.testing.assert_close(capture.rows[LOW_NORM_STAT], share, atol=share_routes, rtol=0)


def test_capture_without_factors_keeps_no_norms():
    q = k = v = torch.randn(2, 4, 8)
    _, capture = capture_attention(q, k, v, KeyRanges.causal(4), scale=0.3, bin_size=1)
    assert capture.value_norms is None and LOW_NORM_STAT not in capture.rows

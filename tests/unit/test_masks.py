"""Mask builders on hand-written cases, in the True-means-may-attend convention."""

import pytest
import torch

from attnviz.attention import scaled_dot_product_attention
from attnviz.masks import (
    KeyRanges,
    causal_mask,
    pad_row,
    padding_mask,
    positions_from_mask,
    sliding_window_mask,
    visible_keys,
)

T, F_ = True, False


def test_causal_mask_square_and_with_cache_offset():
    assert causal_mask(3).tolist() == [[T, F_, F_], [T, T, F_], [T, T, T]]
    # two new queries after three cached tokens: positions 3 and 4
    assert causal_mask(2, 5).tolist() == [[T, T, T, T, F_], [T, T, T, T, T]]
    assert causal_mask(1, 4, offset=1).tolist() == [[T, T, F_, F_]]
    with pytest.raises(ValueError, match="offset"):
        causal_mask(4, 2)


def test_sliding_window_mask():
    assert sliding_window_mask(4, window=2).tolist() == [
        [T, F_, F_, F_],
        [T, T, F_, F_],
        [F_, T, T, F_],
        [F_, F_, T, T],
    ]
    assert sliding_window_mask(1, window=2, k_len=5).tolist() == [[F_, F_, F_, T, T]]
    with pytest.raises(ValueError, match="window"):
        sliding_window_mask(3, window=0)


def test_padding_mask_right_and_left():
    right = padding_mask([3, 1], 4)
    assert right.shape == (2, 1, 1, 4)
    assert right[:, 0, 0].tolist() == [[T, T, T, F_], [T, F_, F_, F_]]
    left = padding_mask([3, 1], 4, side="left")
    assert left[:, 0, 0].tolist() == [[F_, T, T, T], [F_, F_, F_, T]]
    with pytest.raises(ValueError, match="side"):
        padding_mask([1], 2, side="middle")
    with pytest.raises(ValueError, match="lengths"):
        padding_mask([5], 4)


@pytest.mark.parametrize("side", ["left", "right"])
def test_pad_keys_get_exactly_zero_weight(side):
    q = k = v = torch.randn(2, 3, 5, 8)
    mask = padding_mask([5, 2], 5, side=side)
    _, w = scaled_dot_product_attention(q, k, v, mask=mask)
    pads = ~mask.expand(2, 3, 5, 5)
    assert w[pads].abs().max().item() == 0.0
    assert torch.allclose(w.sum(-1), torch.ones(2, 3, 5))


def test_visible_keys():
    assert visible_keys(causal_mask(3), 3, 3).tolist() == [1, 2, 3]
    assert visible_keys(None, 2, 5).tolist() == [5, 5]
    assert visible_keys(padding_mask([2, 3], 3), 3, 3).tolist() == [[[2, 2, 2]], [[3, 3, 3]]]


def test_pad_row_and_positions_follow_padding_mask():
    assert pad_row([7, 8], 4, 0, side="right") == [7, 8, 0, 0]
    assert pad_row([7, 8], 4, 0, side="left") == [0, 0, 7, 8]
    keep = padding_mask([2, 4], 4, side="left")[:, 0, 0]
    assert positions_from_mask(keep).tolist() == [[0, 0, 0, 1], [0, 1, 2, 3]]


def test_key_ranges_are_the_dense_masks():
    assert torch.equal(KeyRanges.causal(5).dense(), causal_mask(5))
    assert torch.equal(KeyRanges.causal(2, 5).dense(), causal_mask(2, 5))  # two new queries after three cached
    assert torch.equal(KeyRanges.causal(6, window=3).dense(), sliding_window_mask(6, 3))
    left = KeyRanges.causal(5, start=2).dense()  # a left-padded decoder row: pads 0, 1
    assert torch.equal(left, causal_mask(5) & padding_mask([3], 5, side="left")[0, 0])
    assert torch.equal(KeyRanges.span(4, 0, 2).dense(), padding_mask([2], 4)[0, 0].expand(4, 4))
    assert torch.equal(KeyRanges.full(3, 4).dense(), torch.ones(3, 4, dtype=torch.bool))


def test_key_ranges_read_back_from_a_mask():
    mask = sliding_window_mask(7, 3) & padding_mask([5], 7, side="left")[0, 0]
    ranges = KeyRanges.from_mask(mask)
    assert torch.equal(ranges.dense(), mask)
    assert ranges.visible().tolist() == [0, 0, 1, 2, 3, 3, 3]
    assert ranges.key_span(0, 2) == (0, 0) and ranges.key_span(3, 7) == (2, 7)
    holes = torch.ones(2, 4, dtype=torch.bool)
    holes[1, 2] = False  # a row whose keys are not one run
    with pytest.raises(ValueError, match="row 1 of the mask is not one contiguous run"):
        KeyRanges.from_mask(holes)


def test_key_ranges_say_what_they_are():
    assert KeyRanges.full(4).describe() == "no mask (every key)"
    assert KeyRanges.causal(4).describe() == "causal"
    assert KeyRanges.causal(9, window=4).describe() == "causal, sliding window of 4"
    assert KeyRanges.causal(9, window=20).describe() == "causal"  # a window longer than the text changes nothing
    assert KeyRanges.causal(6, start=2).describe() == "causal, custom"
    assert KeyRanges.span(4, 1, 3).describe() == "custom"
    assert KeyRanges.causal(4).is_causal() and not KeyRanges.full(4).is_causal()
    assert KeyRanges.causal(4).equals(KeyRanges.from_mask(causal_mask(4)))
    assert not KeyRanges.causal(4).equals(KeyRanges.full(4))

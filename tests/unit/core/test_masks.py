"""Mask builders on hand-written cases, in the True-means-may-attend convention."""

import numpy as np
import pytest
import torch

from attnviz.core.attention import (
    MultiHeadAttention,
    fully_masked_rows,
    scaled_dot_product_attention,
)
from attnviz.core.masks import (
    KeyRanges,
    batch_padding_keep,
    causal_mask,
    check_mask,
    document_mask,
    masked_cells,
    pad_row,
    padding_mask,
    positions_from_mask,
    prefix_lm_mask,
    sliding_window_mask,
    visible_keys,
)
from tests.unit.core.mask_cases import F_, K_LEN, Q_LEN, T, hf_mask


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
    assert str(KeyRanges.full(4).describe()) == "no mask (every key)"
    assert str(KeyRanges.causal(4).describe()) == "causal"
    assert str(KeyRanges.causal(9, window=4).describe()) == "causal, sliding window of 4"
    assert str(KeyRanges.causal(9, window=20).describe()) == "causal"  # a window longer than the text changes nothing
    assert str(KeyRanges.causal(6, start=2).describe()) == "causal, custom"
    assert str(KeyRanges.span(4, 1, 3).describe()) == "custom"
    assert KeyRanges.causal(4).is_causal() and not KeyRanges.full(4).is_causal()
    assert KeyRanges.causal(4).equals(KeyRanges.from_mask(causal_mask(4)))
    assert not KeyRanges.causal(4).equals(KeyRanges.full(4))


@pytest.mark.parametrize("need_weights", [True, False])
def test_integer_mask_is_a_type_error_in_the_module(need_weights):
    mha = MultiHeadAttention(16, 4, n_kv_head=2)
    x = torch.randn(2, 5, 16)
    mask = causal_mask(5).long()
    with pytest.raises(TypeError, match=r"torch\.int64"):
        mha(x, x, x, mask=mask, need_weights=need_weights)
    with pytest.raises(TypeError, match=r"torch\.int64"):
        mha(x, x, x, mask=mask, need_weights=need_weights, is_causal=True)  # checked before the causal part


def test_check_mask_passes_bool_float_and_none():
    assert check_mask(None) is None
    assert check_mask(causal_mask(3)).dtype == torch.bool
    assert check_mask(torch.zeros(3, 3, dtype=torch.float16)).dtype == torch.float16
    with pytest.raises(TypeError, match="complex"):
        check_mask(torch.zeros(3, 3, dtype=torch.complex64))


def test_which_cells_count_as_masked():
    f32_min, f16_min = torch.finfo(torch.float32).min, torch.finfo(torch.float16).min
    mask = torch.tensor([[0.0, -1e4, f16_min, f32_min, float("-inf")]])
    assert masked_cells(mask).tolist() == [[F_, F_, F_, T, T]]
    # a float16 mask cast to float32 to meet float16 scores still counts
    assert masked_cells(mask, torch.float16).tolist() == [[F_, F_, T, T, T]]
    assert masked_cells(causal_mask(2)).tolist() == [[F_, T], [F_, F_]]
    assert fully_masked_rows(torch.full((2, 3), f32_min)).tolist() == [T, T]
    assert fully_masked_rows(torch.full((2, 3), f16_min)).tolist() == [F_, F_]
    assert fully_masked_rows(torch.full((2, 3), f16_min), torch.float16).tolist() == [T, T]
    assert visible_keys(hf_mask(torch.float32), Q_LEN, K_LEN).tolist() == [4, 0, 4]


@pytest.mark.parametrize(
    "build, value",
    [
        (lambda: causal_mask(2.5), r"2\.5"),
        (lambda: causal_mask(3, k_len=4.0), r"4\.0"),
        (lambda: causal_mask(2, 4, offset=1.5), r"1\.5"),
        (lambda: causal_mask(True), "True"),
        (lambda: sliding_window_mask(3, 2.5), r"2\.5"),
        (lambda: sliding_window_mask(3.5, 2), r"3\.5"),
        (lambda: sliding_window_mask(3, True), "True"),
        (lambda: padding_mask([1.7, 2.2]), r"1\.7"),
        (lambda: padding_mask(torch.tensor([1.0, 2.0])), r"1\.0"),
        (lambda: padding_mask([True, False]), "True"),
        (lambda: padding_mask([1, 2], max_len=3.5), r"3\.5"),
        (lambda: prefix_lm_mask(4, 1.5), r"1\.5"),
        (lambda: document_mask([2, 1.5]), r"1\.5"),
        (lambda: batch_padding_keep([1, 2], 2.5), r"2\.5"),
    ],
)
def test_non_integer_sizes_are_value_errors(build, value):
    with pytest.raises(ValueError, match=value):
        build()


def test_integer_scalars_of_numpy_and_torch_are_sizes():
    assert torch.equal(causal_mask(np.int64(3), torch.tensor(4)), causal_mask(3, 4))
    assert torch.equal(sliding_window_mask(np.int32(4), np.uint8(2)), sliding_window_mask(4, 2))
    assert torch.equal(padding_mask(torch.tensor([3, 1]), np.int64(4)), padding_mask([3, 1], 4))
    assert torch.equal(padding_mask(np.array([3, 1]), 4), padding_mask([3, 1], 4))
    assert torch.equal(padding_mask(torch.tensor([3, 1], dtype=torch.int32), 4), padding_mask([3, 1], 4))
    assert padding_mask([]).shape == (0, 1, 1, 0)


def test_prefix_lm_mask_by_hand():
    assert prefix_lm_mask(4, 2).tolist() == [
        [T, T, F_, F_],
        [T, T, F_, F_],
        [T, T, T, F_],
        [T, T, T, T],
    ]
    assert torch.equal(prefix_lm_mask(4, 0), causal_mask(4))
    assert torch.equal(prefix_lm_mask(4, 1), causal_mask(4))  # a prefix of one is already causal
    assert prefix_lm_mask(3, 3).all() and prefix_lm_mask(3, 7).all()
    assert prefix_lm_mask(0, 2).shape == (0, 0)
    with pytest.raises(ValueError, match=r"prefix \(-1\)"):
        prefix_lm_mask(3, -1)
    with pytest.raises(ValueError, match=r"q_len \(-2\)"):
        prefix_lm_mask(-2, 1)


def test_document_mask_by_hand():
    assert document_mask([2, 3]).tolist() == [
        [T, F_, F_, F_, F_],
        [T, T, F_, F_, F_],
        [F_, F_, T, F_, F_],
        [F_, F_, T, T, F_],
        [F_, F_, T, T, T],
    ]
    assert document_mask([2, 1, 2], causal=False).tolist() == [
        [T, T, F_, F_, F_],
        [T, T, F_, F_, F_],
        [F_, F_, T, F_, F_],
        [F_, F_, F_, T, T],
        [F_, F_, F_, T, T],
    ]
    assert torch.equal(document_mask([4]), causal_mask(4))
    assert document_mask([]).shape == (0, 0)
    with pytest.raises(ValueError, match=r"\[2, 0\] must be positive"):
        document_mask([2, 0])
    with pytest.raises(ValueError, match="non-negative"):
        document_mask([2, -1])


def test_batch_padding_keep_right():
    keep = batch_padding_keep([3, 1], 3)
    assert keep.shape == (2, 3, 3)
    assert keep.tolist() == [
        [[T, T, T], [T, T, T], [T, T, T]],
        [[T, F_, F_], [T, F_, F_], [T, F_, F_]],  # pad rows 1, 2 see the real key
    ]
    assert batch_padding_keep([3, 1], 3, causal=True).tolist() == [
        [[T, F_, F_], [T, T, F_], [T, T, T]],
        [[T, F_, F_], [T, F_, F_], [T, F_, F_]],
    ]


def test_batch_padding_keep_left():
    assert batch_padding_keep([2, 3], 3, side="left").tolist() == [
        [[F_, T, T], [F_, T, T], [F_, T, T]],
        [[T, T, T], [T, T, T], [T, T, T]],
    ]
    assert batch_padding_keep([2, 3], 3, side="left", causal=True).tolist() == [
        [[F_, T, T], [F_, T, F_], [F_, T, T]],  # pad row 0 sees the real keys, not nothing
        [[T, F_, F_], [T, T, F_], [T, T, T]],
    ]


def test_batch_padding_keep_agrees_with_padding_and_causal_masks_on_real_rows():
    lengths, T_ = [4, 2, 0], 4
    for side in ("left", "right"):
        keys = padding_mask(lengths, T_, side=side)[:, 0]  # (3, 1, T)
        real = keys.transpose(-2, -1).expand(3, T_, T_)  # (3, T, T): rows of real queries
        keep = batch_padding_keep(lengths, T_, side=side, causal=True)
        assert torch.equal(keep[real], (keys & causal_mask(T_)).expand(3, T_, T_)[real])
        assert torch.equal(keep[~real], keys.expand(3, T_, T_)[~real])  # pad rows: exactly the real keys
        assert not keep[2].any()  # an empty sequence sees nothing
    with pytest.raises(ValueError, match="max_len=2"):
        batch_padding_keep([3], 2)
    with pytest.raises(ValueError, match="side"):
        batch_padding_keep([1], 2, side="top")


@pytest.mark.parametrize("q_len, prefix", [(0, 0), (1, 0), (5, 0), (5, 2), (5, 5), (5, 9), (6, 1)])
def test_key_ranges_prefix_lm_is_the_dense_mask(q_len, prefix):
    assert torch.equal(KeyRanges.prefix_lm(q_len, prefix).dense(), prefix_lm_mask(q_len, prefix))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("lengths", [[1], [3], [2, 3], [1, 1, 1], [3, 1, 2]], ids=str)
def test_key_ranges_documents_are_the_dense_mask(lengths, causal):
    ranges = KeyRanges.documents(lengths, causal=causal)
    assert torch.equal(ranges.dense(), document_mask(lengths, causal=causal))
    assert ranges.equals(KeyRanges.from_mask(document_mask(lengths, causal=causal)))


def test_key_ranges_builders_validate():
    assert KeyRanges.prefix_lm(4, 2).hi.tolist() == [2, 2, 3, 4]
    assert KeyRanges.documents([2, 3], causal=False).lo.tolist() == [0, 0, 2, 2, 2]
    with pytest.raises(ValueError, match=r"2\.5"):
        KeyRanges.prefix_lm(4, 2.5)
    with pytest.raises(ValueError, match="positive"):
        KeyRanges.documents([0, 2])

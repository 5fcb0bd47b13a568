"""The mask lab's library: which masks both attention paths accept, and the mask builders, on hand-written cases."""

import numpy as np
import pytest
import torch

from attnviz.attention import (
    MultiHeadAttention,
    fully_masked_rows,
    fused_attention,
    masked_softmax,
    scaled_dot_product_attention,
)
from attnviz.head_stats import head_statistics
from attnviz.masks import (
    KeyRanges,
    batch_padding_keep,
    causal_mask,
    check_mask,
    document_mask,
    masked_cells,
    padding_mask,
    prefix_lm_mask,
    sliding_window_mask,
    visible_keys,
)

T, F_ = True, False
B, N_HEAD, N_KV_HEAD, Q_LEN, K_LEN, HEAD_DIM = 2, 4, 2, 3, 5, 8
PATH_TOL = 1e-6


def qkv(seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, N_HEAD, Q_LEN, HEAD_DIM, generator=g)
    k = torch.randn(B, N_KV_HEAD, K_LEN, HEAD_DIM, generator=g)
    v = torch.randn(B, N_KV_HEAD, K_LEN, HEAD_DIM, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def inspectable(q, k, v, mask):
    return scaled_dot_product_attention(q, k, v, mask)[0]


PATHS = [inspectable, fused_attention]


# --- A1: integer masks are rejected on every path -------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.int32])
@pytest.mark.parametrize("path", PATHS)
def test_integer_mask_is_a_type_error_on_both_paths(path, dtype):
    q, k, v = qkv()
    mask = causal_mask(Q_LEN, K_LEN).to(dtype)  # 0/1, once silently added to the scores
    with pytest.raises(TypeError, match=rf"{dtype}.*bool keep-mask \(True = may attend\).*additive float mask"):
        path(q, k, v, mask)


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


# --- A2: finfo.min counts as masked ---------------------------------------------------------------


def hf_mask(dtype, dead_row=1, hidden_key=3):
    """A Hugging Face-style additive mask (Q_LEN, K_LEN): finfo.min on one whole row and one key."""
    mask = torch.zeros(Q_LEN, K_LEN, dtype=dtype)
    mask[:, hidden_key] = torch.finfo(dtype).min
    mask[dead_row] = torch.finfo(dtype).min
    return mask


@pytest.mark.parametrize("path", PATHS)
def test_a_row_at_finfo_min_gets_zero_output_on_both_paths(path):
    q, k, v = qkv()
    out = path(q, k, v, hf_mask(torch.float32))
    assert out[:, :, 1].abs().max().item() == 0.0
    assert out[:, :, [0, 2]].abs().min().item() > 0.0  # the other rows are untouched


def test_finfo_min_gives_the_same_weights_as_minus_inf():
    q, k, v = qkv()
    hf = hf_mask(torch.float32)
    inf = hf.masked_fill(hf == torch.finfo(torch.float32).min, float("-inf"))
    out_hf, w_hf = scaled_dot_product_attention(q, k, v, hf)
    out_inf, w_inf = scaled_dot_product_attention(q, k, v, inf)
    assert w_hf[:, :, 1].abs().max().item() == 0.0  # the dead row: zeros, not a uniform 1/K_LEN
    assert w_hf[..., 3].abs().max().item() == 0.0  # the hidden key: exp underflows to exactly 0
    assert (w_hf - w_inf).abs().max().item() <= 1e-7
    assert (out_hf - out_inf).abs().max().item() <= 1e-7
    assert (fused_attention(q, k, v, hf) - out_inf).abs().max().item() <= PATH_TOL


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_finfo_min_in_the_model_dtype_on_both_paths(dtype):
    q, k, v = qkv(dtype=dtype)
    mask = hf_mask(dtype)
    slow, weights = scaled_dot_product_attention(q, k, v, mask)
    fast = fused_attention(q, k, v, mask)
    assert weights[:, :, 1].abs().max().item() == 0.0
    assert slow[:, :, 1].abs().max().item() == 0.0 and fast[:, :, 1].abs().max().item() == 0.0


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


def test_masked_softmax_finds_finfo_min_rows_by_itself():
    scores = torch.tensor([[1.0, 2.0], [torch.finfo(torch.float32).min] * 2])
    assert masked_softmax(scores)[1].tolist() == [0.0, 0.0]


# --- A3: sizes are integers -----------------------------------------------------------------------


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


# --- A4: both paths agree on every mask shape -----------------------------------------------------

ACCEPTED_SHAPES = [
    (K_LEN,),
    (Q_LEN, K_LEN),
    (N_HEAD, Q_LEN, K_LEN),
    (B, 1, 1, K_LEN),
    (B, 1, Q_LEN, K_LEN),
    (B, N_HEAD, Q_LEN, K_LEN),
    (1, 1, Q_LEN, K_LEN),
]
REJECTED_SHAPES = [(Q_LEN,), (K_LEN + 1,), (Q_LEN + 1, K_LEN), (B, 1, K_LEN), (3, N_HEAD, Q_LEN, K_LEN), ()]


def random_mask(shape, kind, seed=3):
    keep = torch.rand(shape, generator=torch.Generator().manual_seed(seed)) > 0.3
    keep[..., 0] = True  # no fully masked rows: those are tested above
    if kind == "bool":
        return keep
    return torch.zeros(shape).masked_fill(~keep, float("-inf"))


@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("shape", ACCEPTED_SHAPES, ids=str)
def test_both_paths_agree_on_every_accepted_shape(shape, kind):
    q, k, v = qkv()
    mask = random_mask(shape, kind)
    slow, weights = scaled_dot_product_attention(q, k, v, mask)
    fast = fused_attention(q, k, v, mask)
    assert slow.shape == fast.shape == (B, N_HEAD, Q_LEN, HEAD_DIM)
    assert (slow - fast).abs().max().item() <= PATH_TOL
    assert weights.shape == (B, N_HEAD, Q_LEN, K_LEN)
    hidden = masked_cells(mask).expand(B, N_HEAD, Q_LEN, K_LEN)
    assert weights[hidden].abs().max().item() == 0.0


def test_a_1d_mask_is_a_key_mask_for_every_query():
    q, k, v = qkv()
    keys = torch.tensor([T, F_, T, T, F_])
    as_4d = keys[None, None, None, :]  # (1, 1, 1, K_LEN)
    for path in PATHS:
        assert (path(q, k, v, keys) - path(q, k, v, as_4d)).abs().max().item() == 0.0
    assert check_mask(keys, (B, N_HEAD, Q_LEN, K_LEN)).shape == (1, K_LEN)


@pytest.mark.parametrize("shape", REJECTED_SHAPES, ids=str)
@pytest.mark.parametrize("path", PATHS)
def test_a_mask_that_does_not_broadcast_is_the_same_value_error_on_both_paths(path, shape):
    q, k, v = qkv()
    mask = torch.ones(shape, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"does not broadcast to \(batch, n_head, q_len, k_len\) = \(2, 4, 3, 5\)"):
        path(q, k, v, mask)


def test_a_mask_with_a_larger_batch_than_the_queries_is_rejected():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"\(4, 1, 1, 5\)"):
        scaled_dot_product_attention(q, k, v, torch.ones(4, 1, 1, K_LEN, dtype=torch.bool))


@pytest.mark.parametrize("shape", [(5,), (5, 5), (2, 1, 1, 5), (2, 1, 5, 5), (2, 4, 5, 5)], ids=str)
def test_the_module_paths_agree_on_every_accepted_shape(shape):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, n_kv_head=2).eval()
    x = torch.randn(2, 5, 16)
    mask = random_mask(shape, "bool")
    slow, _ = mha(x, x, x, mask=mask, need_weights=True)
    fast, _ = mha(x, x, x, mask=mask, need_weights=False)
    assert (slow - fast).abs().max().item() <= PATH_TOL
    with pytest.raises(ValueError, match="does not broadcast"):
        mha(x, x, x, mask=torch.ones(4, dtype=torch.bool), need_weights=False)


# --- A5: head statistics --------------------------------------------------------------------------


def test_head_statistics_rejects_an_integer_mask_and_no_keys():
    weights = torch.full((1, 2, 3, 3), 1 / 3)
    with pytest.raises(TypeError, match=r"torch\.uint8"):
        head_statistics(weights, causal_mask(3).to(torch.uint8))
    with pytest.raises(ValueError, match="k_len = 0"):
        head_statistics(torch.ones(1, 2, 3, 0))


def test_head_statistics_skips_a_finfo_min_row():
    weights = torch.tensor([[[0.5, 0.5], [0.0, 0.0]]])  # (n_head=1, q_len=2, k_len=2); row 1 saw nothing
    mask = torch.tensor([[0.0, 0.0], [torch.finfo(torch.float32).min] * 2])
    stats = head_statistics(weights, mask).iloc[0]
    assert stats["entropy_norm"] == pytest.approx(1.0)  # only row 0 counted


# --- B: builders ----------------------------------------------------------------------------------


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


def test_batch_padding_keep_drives_attention_with_no_dead_rows():
    q, k, v = (torch.randn(2, 4, 5, 8) for _ in range(3))
    keep = batch_padding_keep([5, 2], 5, side="left", causal=True)[:, None]  # (B, 1, T, T)
    slow, weights = scaled_dot_product_attention(q, k, v, keep)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 4, 5))
    assert (slow - fused_attention(q, k, v, keep)).abs().max().item() <= PATH_TOL


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

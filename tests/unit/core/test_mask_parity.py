"""Issue 19 G: the inspectable and the fused attention path accept exactly the same masks, whatever their dtype and
broadcastable shape, and give the same output or the same error (:func:`attnviz.core.masks.check_mask` is the one
rule both call: a float mask is cast to the queries' dtype, a bool mask stays bool, an integer mask is a TypeError)."""

import re

import pytest
import torch

from attnviz.core.attention import MultiHeadAttention, fused_attention, scaled_dot_product_attention
from attnviz.core.masks import check_mask
from tests.unit.core.mask_cases import HEAD_DIM, K_LEN, N_HEAD, N_KV_HEAD, Q_LEN, B, hf_mask

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
MASK_DTYPES = [torch.bool, *FLOATS]
INTEGERS = [torch.uint8, torch.int8, torch.int32, torch.int64]
SHAPES = [
    (K_LEN,),
    (Q_LEN, K_LEN),
    (N_HEAD, Q_LEN, K_LEN),
    (1, 1, 1, K_LEN),
    (B, 1, 1, K_LEN),
    (B, 1, Q_LEN, K_LEN),
    (B, N_HEAD, Q_LEN, K_LEN),
]
REJECTED = [
    (),
    (Q_LEN,),
    (K_LEN + 1,),
    (Q_LEN + 1, K_LEN),
    (B, 1, K_LEN),
    (3, N_HEAD, Q_LEN, K_LEN),
    (1, 1, 1, 1, K_LEN),
]
# |output - float64 reference| per query dtype: half precision rounds q, k, v and the softmax to 8 or 11 bits
TOL = {torch.float16: 4e-3, torch.bfloat16: 4e-2, torch.float32: 2e-6, torch.float64: 1e-12}


def qkv(dtype):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, N_HEAD, Q_LEN, HEAD_DIM, generator=g, dtype=torch.float64)
    k = torch.randn(B, N_KV_HEAD, K_LEN, HEAD_DIM, generator=g, dtype=torch.float64)
    v = torch.randn(B, N_KV_HEAD, K_LEN, HEAD_DIM, generator=g, dtype=torch.float64)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def keep_mask(shape):
    keep = torch.rand(shape, generator=torch.Generator().manual_seed(3)) > 0.3
    if keep.ndim:
        keep[..., 0] = True  # every row sees a key: fully masked rows are tested below
    return keep


def as_dtype(keep, dtype):
    if dtype == torch.bool:
        return keep
    return torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, float("-inf"))


def reference(q, k, v, keep):
    """The textbook softmax in float64 with K/V repeated per head: (B, n_head, q_len, head_dim)."""
    q, k, v = q.double(), k.double(), v.double()
    n_rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)
    scores = q @ k.transpose(-2, -1) / HEAD_DIM**0.5
    keep = keep[None, :] if keep.ndim == 1 else keep
    return scores.masked_fill(~keep, float("-inf")).softmax(-1) @ v


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("mask_dtype", MASK_DTYPES, ids=str)
@pytest.mark.parametrize("q_dtype", FLOATS, ids=str)
def test_both_paths_give_the_reference_output_for_every_mask_dtype_and_shape(q_dtype, mask_dtype, shape):
    q, k, v = qkv(q_dtype)
    keep = keep_mask(shape)
    mask = as_dtype(keep, mask_dtype)
    slow, weights = scaled_dot_product_attention(q, k, v, mask)
    fast = fused_attention(q, k, v, mask)
    assert slow.dtype == fast.dtype == weights.dtype == q_dtype
    assert slow.shape == fast.shape == (B, N_HEAD, Q_LEN, HEAD_DIM)
    expected = reference(q, k, v, keep)
    assert (slow.double() - expected).abs().max().item() <= TOL[q_dtype]
    assert (fast.double() - expected).abs().max().item() <= TOL[q_dtype]
    hidden = ~(keep[None, :] if keep.ndim == 1 else keep).expand(B, N_HEAD, Q_LEN, K_LEN)
    assert weights[hidden].abs().max().item() == 0.0


@pytest.mark.parametrize(
    ("q_dtype", "mask_dtype"),
    [(torch.float32, torch.float64), (torch.float32, torch.float16), (torch.float16, torch.float32)],
    ids=str,
)
def test_the_findings_pairs_work_on_the_fused_path_too(q_dtype, mask_dtype):
    """The cases the fuzz found: torch's kernel raised 'Expected attn_mask dtype … to match query dtype'."""
    q, k, v = qkv(q_dtype)
    keep = keep_mask((Q_LEN, K_LEN))
    fast = fused_attention(q, k, v, as_dtype(keep, mask_dtype))
    assert (fast.double() - reference(q, k, v, keep)).abs().max().item() <= TOL[q_dtype]


@pytest.mark.parametrize("mask_dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("q_dtype", [torch.float32, torch.float64], ids=str)
def test_finfo_min_of_the_masks_own_dtype_hides_on_both_paths_in_a_wider_query_dtype(q_dtype, mask_dtype):
    """float16's -65504 is an ordinary number in float32 scores: it still hides the key and kills the row."""
    q, k, v = qkv(q_dtype)
    mask = hf_mask(mask_dtype)  # row 1 all finfo.min, key 3 finfo.min
    slow, weights = scaled_dot_product_attention(q, k, v, mask)
    fast = fused_attention(q, k, v, mask)
    assert slow[:, :, 1].abs().max().item() == 0.0 and fast[:, :, 1].abs().max().item() == 0.0
    assert weights[:, :, 1].abs().max().item() == 0.0 and weights[..., 3].abs().max().item() == 0.0
    keep = torch.ones(Q_LEN, K_LEN, dtype=torch.bool)
    keep[:, 3] = False
    expected = reference(q, k, v, keep)
    live = [0, 2]
    assert (slow[:, :, live].double() - expected[:, :, live]).abs().max().item() <= TOL[q_dtype]
    assert (fast[:, :, live].double() - expected[:, :, live]).abs().max().item() <= TOL[q_dtype]


PATHS = {
    "inspectable": lambda q, k, v, m: scaled_dot_product_attention(q, k, v, m)[0],
    "fused": fused_attention,
    "fused causal": lambda q, k, v, m: fused_attention(q, k, v, m, is_causal=True),
    "inspectable causal": lambda q, k, v, m: scaled_dot_product_attention(q, k, v, m, is_causal=True)[0],
}


@pytest.mark.parametrize("dtype", [*INTEGERS, torch.complex64], ids=str)
@pytest.mark.parametrize("path", PATHS)
def test_a_mask_neither_bool_nor_float_is_the_same_type_error_on_every_path(path, dtype):
    q, k, v = qkv(torch.float32)
    mask = keep_mask((Q_LEN, K_LEN)).to(dtype)
    with pytest.raises(TypeError, match=rf"^mask has dtype {dtype}: use a bool keep-mask \(True = may attend\)"):
        PATHS[path](q, k, v, mask)


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("shape", REJECTED, ids=str)
@pytest.mark.parametrize("path", PATHS)
def test_a_shape_that_does_not_broadcast_is_the_same_value_error_on_every_path(path, shape, mask_dtype):
    q, k, v = qkv(torch.float32)
    mask = torch.zeros(shape, dtype=mask_dtype)
    expected = f"mask of shape {tuple(shape)} does not broadcast to (batch, n_head, q_len, k_len) = (2, 4, 3, 5)"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        PATHS[path](q, k, v, mask)


def test_check_mask_casts_a_float_mask_to_the_queries_dtype_and_leaves_bool_alone():
    q = torch.zeros(1, 1, 2, 4, dtype=torch.float32)
    as_f16 = torch.tensor([0.0, -65504.0, float("-inf"), -1.5], dtype=torch.float16)
    out = check_mask(as_f16, (1, 1, 2, 4), like=q)
    assert out.dtype == torch.float32 and out.shape == (1, 4)
    assert out.tolist() == [[0.0, float("-inf"), float("-inf"), -1.5]]  # finfo(float16).min hides, -1.5 stays
    keep = torch.tensor([True, False, True, True])
    assert check_mask(keep, (1, 1, 2, 4), like=q).dtype == torch.bool
    same = torch.zeros(2, 4)
    assert check_mask(same, (1, 1, 2, 4), like=q) is same  # already the queries' dtype: no copy


@pytest.mark.parametrize("mask_dtype", MASK_DTYPES, ids=str)
@pytest.mark.parametrize("x_dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("shape", [(5,), (5, 5), (2, 1, 1, 5), (2, 4, 5, 5)], ids=str)
def test_multi_head_attention_need_weights_false_and_true_agree_on_every_mask(shape, x_dtype, mask_dtype):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, n_kv_head=2).eval().to(x_dtype)
    x = torch.randn(2, 5, 16, dtype=x_dtype)
    mask = as_dtype(keep_mask(shape), mask_dtype)
    slow, weights = mha(x, x, x, mask=mask, need_weights=True)
    fast, none = mha(x, x, x, mask=mask, need_weights=False)
    assert none is None and weights.shape == (2, 4, 5, 5)
    assert (slow - fast).abs().max().item() <= TOL[x_dtype] * 10
    causal_slow, _ = mha(x, x, x, mask=mask, need_weights=True, is_causal=True)
    causal_fast, _ = mha(x, x, x, mask=mask, need_weights=False, is_causal=True)
    assert (causal_slow - causal_fast).abs().max().item() <= TOL[x_dtype] * 10


@pytest.mark.parametrize("need_weights", [True, False])
def test_multi_head_attention_refuses_alike_with_either_need_weights(need_weights):
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 5, 16)
    with pytest.raises(TypeError, match=r"^mask has dtype torch.int64"):
        mha(x, x, x, mask=torch.ones(5, 5, dtype=torch.long), need_weights=need_weights)
    with pytest.raises(ValueError, match=r"^mask of shape \(4,\) does not broadcast .* = \(2, 4, 5, 5\)$"):
        mha(x, x, x, mask=torch.ones(4, dtype=torch.float16), need_weights=need_weights)

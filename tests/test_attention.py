"""Parity of attnviz's attention with PyTorch's, the spec everything else rests on."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnviz.attention import (
    KVCache,
    MultiHeadAttention,
    fully_masked_rows,
    kv_cache_bytes,
    mask_to_additive,
    repeat_kv,
    scaled_dot_product_attention,
)
from attnviz.masks import causal_mask, padding_mask

TOL = 1e-5  # float32, as the issue asks


def rand_qkv(batch=2, n_head=8, n_kv_head=8, q_len=7, k_len=9, head_dim=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, n_head, q_len, head_dim, generator=g)
    k = torch.randn(batch, n_kv_head, k_len, head_dim, generator=g)
    v = torch.randn(batch, n_kv_head, k_len, head_dim, generator=g)
    return q, k, v


def random_bool_mask(batch, n_head, q_len, k_len, seed=1):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(batch, n_head, q_len, k_len, generator=g) > 0.4
    mask[..., 0] = True  # torch's SDPA gives NaN on fully masked rows; those are tested separately
    return mask


@pytest.mark.parametrize("n_head,n_kv_head", [(8, 8), (8, 2), (8, 1), (9, 3)])
@pytest.mark.parametrize("mask_kind", ["none", "causal", "bool", "float", "padding"])
def test_sdpa_matches_torch(n_head, n_kv_head, mask_kind):
    q, k, v = rand_qkv(n_head=n_head, n_kv_head=n_kv_head, q_len=9, k_len=9)
    mask = {
        "none": None,
        "causal": causal_mask(9),
        "bool": random_bool_mask(2, n_head, 9, 9),
        "float": torch.randn(2, 1, 9, 9),
        "padding": padding_mask([9, 5], 9),
    }[mask_kind]
    ours, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=n_head != n_kv_head)
    assert (ours - ref).abs().max().item() <= TOL
    assert weights.shape == (2, n_head, 9, 9)
    assert torch.allclose(weights.sum(-1), torch.ones(2, n_head, 9), atol=1e-6)


def test_sdpa_custom_scale_and_weights_by_hand():
    q = torch.tensor([[[[1.0, 0.0]]]])  # (1, 1, 1, 2)
    k = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]])  # (1, 1, 2, 2)
    v = torch.tensor([[[[10.0, 0.0], [0.0, 10.0]]]])
    out, w = scaled_dot_product_attention(q, k, v, scale=math.log(3.0))
    # scores are [log 3, 0] -> softmax [3/4, 1/4]
    assert torch.allclose(w, torch.tensor([[[[0.75, 0.25]]]]))
    assert torch.allclose(out, torch.tensor([[[[7.5, 2.5]]]]))
    _, w_default = scaled_dot_product_attention(q, k, v)
    e = math.exp(1 / math.sqrt(2))
    assert w_default[0, 0, 0, 0].item() == pytest.approx(e / (e + 1), abs=1e-6)


def test_gqa_equals_mha_with_repeated_kv():
    q, k, v = rand_qkv(n_head=6, n_kv_head=2)
    gqa, w_gqa = scaled_dot_product_attention(q, k, v, mask=causal_mask(7, 9))
    mha, w_mha = scaled_dot_product_attention(q, repeat_kv(k, 3), repeat_kv(v, 3), mask=causal_mask(7, 9))
    assert torch.equal(gqa, mha) and torch.equal(w_gqa, w_mha)
    # head h reads kv head h // 3
    assert torch.equal(repeat_kv(k, 3)[:, 4], k[:, 1])


def test_fully_masked_rows_give_zeros_not_nan():
    q, k, v = rand_qkv(batch=1, n_head=2, n_kv_head=2, q_len=4, k_len=4)
    mask = causal_mask(4).clone()
    mask[2] = False  # row 2 may attend to nothing
    out, w = scaled_dot_product_attention(q, k, v, mask=mask)
    assert not torch.isnan(out).any() and not torch.isnan(w).any()
    assert torch.equal(w[..., 2, :], torch.zeros(1, 2, 4))
    assert torch.equal(out[..., 2, :], torch.zeros(1, 2, 16))
    assert fully_masked_rows(mask).tolist() == [False, False, True, False]
    assert fully_masked_rows(mask_to_additive(mask, torch.float32)).tolist() == [False, False, True, False]
    # the other rows are untouched by the dead one
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(4))
    assert (out[..., [0, 1, 3], :] - ref[..., [0, 1, 3], :]).abs().max() <= TOL


def test_group_mismatch_is_a_clear_error():
    q, k, v = rand_qkv(n_head=8, n_kv_head=3)
    with pytest.raises(ValueError, match=r"n_head \(8\) must be a positive multiple of n_kv_head \(3\)"):
        scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("n_kv_head", [None, 2, 1])
@pytest.mark.parametrize("use_mask", [False, True])
def test_fast_and_inspectable_paths_agree(n_kv_head, use_mask):
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4, n_kv_head=n_kv_head).eval()
    x = torch.randn(2, 6, 32)
    mask = causal_mask(6) & padding_mask([6, 4], 6) if use_mask else None
    slow, weights = mha(x, x, x, mask=mask, need_weights=True)
    fast, none = mha(x, x, x, mask=mask, need_weights=False)
    assert none is None and weights.shape == (2, 4, 6, 6)
    assert (slow - fast).abs().max().item() <= TOL


def test_fast_path_zeroes_fully_masked_rows_like_the_slow_path():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2, bias=False).eval()
    x = torch.randn(1, 5, 16)
    mask = causal_mask(5) & padding_mask([3], 5, side="left")  # rows 0 and 1 see only pads
    slow, _ = mha(x, x, x, mask=mask)
    fast, _ = mha(x, x, x, mask=mask, need_weights=False)
    assert not torch.isnan(fast).any()
    assert (slow - fast).abs().max().item() <= TOL


def test_matches_torch_multihead_attention():
    torch.manual_seed(0)
    d_model, n_head = 48, 6
    ref = torch.nn.MultiheadAttention(d_model, n_head, bias=True, batch_first=True).eval()
    ours = MultiHeadAttention(d_model, n_head).eval()
    w_q, w_k, w_v = ref.in_proj_weight.chunk(3)
    b_q, b_k, b_v = ref.in_proj_bias.chunk(3)
    with torch.no_grad():
        for lin, w, b in [(ours.w_q, w_q, b_q), (ours.w_k, w_k, b_k), (ours.w_v, w_v, b_v)]:
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        ours.w_o.weight.copy_(ref.out_proj.weight)
        ours.w_o.bias.copy_(ref.out_proj.bias)
    query, memory = torch.randn(2, 5, d_model), torch.randn(2, 8, d_model)
    lengths = [8, 6]
    # torch's masks say True = *blocked*; ours say True = may attend
    ref_out, ref_w = ref(
        query, memory, memory, key_padding_mask=~padding_mask(lengths, 8)[:, 0, 0], average_attn_weights=False
    )
    out, w = ours(query, memory, memory, mask=padding_mask(lengths, 8))
    assert (out - ref_out).abs().max().item() <= TOL
    assert (w - ref_w).abs().max().item() <= TOL
    causal = causal_mask(5)
    ref_out, _ = ref(query, query, query, attn_mask=~causal)
    out, _ = ours(query, query, query, mask=causal)
    assert (out - ref_out).abs().max().item() <= TOL


def test_module_config_errors_carry_the_numbers():
    with pytest.raises(ValueError, match=r"d_model \(100\) must be divisible by n_head \(3\); 100 % 3 = 1"):
        MultiHeadAttention(100, 3)
    with pytest.raises(ValueError, match=r"n_head \(8\) must be a positive multiple of n_kv_head \(3\)"):
        MultiHeadAttention(64, 8, n_kv_head=3)


@pytest.mark.parametrize("n_kv_head", [4, 2, 1])
def test_kv_cache_decoding_equals_full_causal_forward(n_kv_head):
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4, n_kv_head=n_kv_head).eval()
    x = torch.randn(2, 10, 32)
    full, full_w = mha(x, x, x, mask=causal_mask(10))
    cache = KVCache()
    prompt, _ = mha(x[:, :3], x[:, :3], x[:, :3], mask=causal_mask(3), kv_cache=cache)
    steps = [prompt]
    for t in range(3, 10):
        step = x[:, t : t + 1]
        out, w = mha(step, step, step, mask=causal_mask(1, t + 1), kv_cache=cache)
        assert w.shape == (2, 4, 1, t + 1)
        assert (w[:, :, 0] - full_w[:, :, t, : t + 1]).abs().max().item() <= TOL
        steps.append(out)
    assert (torch.cat(steps, dim=1) - full).abs().max().item() <= TOL
    head_dim = 32 // 4
    assert len(cache) == 10
    assert cache.nbytes == 2 * 2 * n_kv_head * 10 * head_dim * 4  # k and v, batch 2, float32
    assert kv_cache_bytes([cache, KVCache()]) == cache.nbytes


def test_rotation_hook_sees_absolute_positions_with_cache():
    seen = []

    def rotate(q, k, positions):
        seen.append(positions.tolist())
        return q, k

    mha = MultiHeadAttention(8, 2).eval()
    cache = KVCache()
    x = torch.randn(1, 3, 8)
    mha(x, x, x, kv_cache=cache, rotate=rotate, mask=causal_mask(3))
    mha(x[:, :1], x[:, :1], x[:, :1], kv_cache=cache, rotate=rotate, mask=causal_mask(1, 4))
    assert seen == [[0, 1, 2], [3]]

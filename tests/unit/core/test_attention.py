"""Parity of attnviz's attention with PyTorch's, the spec everything else rests on."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnviz.core.attention import (
    KVCache,
    MultiHeadAttention,
    attention_scores,
    fully_masked_rows,
    fused_attention,
    kv_cache_bytes,
    mask_to_additive,
    masked_softmax,
    repeat_kv,
    scaled_dot_product_attention,
    weighted_values,
    with_causal,
)
from attnviz.core.masks import (
    batch_padding_keep,
    causal_mask,
    check_mask,
    masked_cells,
    padding_mask,
)
from tests.tolerances import bound, derived_bound
from tests.unit.core.mask_cases import F_, HEAD_DIM, K_LEN, N_HEAD, N_KV_HEAD, Q_LEN, B, T, hf_mask

TOL = bound("attention")  # float32: a score of head_dim products (tests/tolerances.py)


def row_sum_tol(k_len: int) -> float:
    """A float32 softmax row summed again, against 1: the softmax divides by a sum of k_len terms and the check
    re-sums k_len weights ≤ 1, each rounding by eps relative."""
    return derived_bound("float32", 1.0, 2 * k_len)


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
    assert torch.allclose(weights.sum(-1), torch.ones(2, n_head, 9), atol=row_sum_tol(9), rtol=0)


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
    # float32 against float64 by hand: a score ≤ 1 of 2 products, the exp of 2 scores and their sum
    assert w_default[0, 0, 0, 0].item() == pytest.approx(e / (e + 1), abs=derived_bound("float32", 1.0, 2 + 2))


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


PATHS = {
    "weights": lambda *a, **kw: scaled_dot_product_attention(*a, **kw)[0],
    "fused": fused_attention,
}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("n_kv_head", [9, 3, 1])
@pytest.mark.parametrize("q_len,k_len", [(7, 7), (3, 10), (1, 10)])
def test_is_causal_equals_the_explicit_causal_mask(path, n_kv_head, q_len, k_len):
    q, k, v = rand_qkv(n_head=9, n_kv_head=n_kv_head, q_len=q_len, k_len=k_len)
    attend = PATHS[path]
    implicit = attend(q, k, v, is_causal=True)
    explicit = attend(q, k, v, mask=causal_mask(q_len, k_len))
    assert (implicit - explicit).abs().max().item() <= TOL


@pytest.mark.parametrize("n_kv_head", [9, 3])
def test_is_causal_with_a_kv_cache_aligns_bottom_right(n_kv_head):
    # 3 new queries after 7 cached keys: query i sits at position 7 + i, so it sees 8 + i keys.
    # torch's is_causal would align top-left and let query 0 see only key 0.
    q, k, v = rand_qkv(n_head=9, n_kv_head=n_kv_head, q_len=3, k_len=10)
    out, w = scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (w > 0).sum(-1)[0, 0].tolist() == [8, 9, 10]
    assert torch.equal(w[..., 0, 8:], torch.zeros(2, 9, 2))
    fused = fused_attention(q, k, v, is_causal=True)
    assert (out - fused).abs().max().item() <= TOL
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=n_kv_head != 9)
    assert (out - top_left).abs().max().item() > 1e-2


@pytest.mark.parametrize("n_head,n_kv_head", [(9, 9), (9, 3), (9, 1)])
@pytest.mark.parametrize("q_len", [1, 64, 300])
def test_is_causal_matches_torch_in_both_paths(n_head, n_kv_head, q_len):
    q, k, v = rand_qkv(batch=1, n_head=n_head, n_kv_head=n_kv_head, q_len=q_len, k_len=q_len, head_dim=64)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=n_head != n_kv_head)
    out, w = scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (out - ref).abs().max().item() <= TOL
    assert (fused_attention(q, k, v, is_causal=True) - ref).abs().max().item() <= TOL
    assert torch.equal(w.triu(1), torch.zeros_like(w))
    assert torch.allclose(w.sum(-1), torch.ones(1, n_head, q_len), atol=row_sum_tol(q_len), rtol=0)


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("n_kv_head", [4, 2])
def test_is_causal_and_a_mask_both_apply(path, n_kv_head):
    q, k, v = rand_qkv(n_head=4, n_kv_head=n_kv_head, q_len=6, k_len=6)
    attend = PATHS[path]
    pad = padding_mask([6, 4], 6)  # (2, 1, 1, 6), right padding: no row is fully masked
    both = attend(q, k, v, mask=pad, is_causal=True)
    assert (both - attend(q, k, v, mask=pad & causal_mask(6))).abs().max().item() <= TOL
    assert (both - attend(q, k, v, mask=pad)).abs().max().item() > 1e-2  # the causal part did something
    assert (both - attend(q, k, v, is_causal=True)).abs().max().item() > 1e-2  # so did the padding
    additive = mask_to_additive(pad, torch.float32)
    assert (attend(q, k, v, mask=additive, is_causal=True) - both).abs().max().item() <= TOL
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=pad & causal_mask(6), enable_gqa=n_kv_head != 4)
    assert (both - ref).abs().max().item() <= TOL


def test_with_causal_combines_bool_and_float_masks():
    pad = padding_mask([3], 4)  # (1, 1, 1, 4)
    assert torch.equal(with_causal(None, 4, 4), causal_mask(4))
    assert torch.equal(with_causal(pad, 4, 4), pad & causal_mask(4))
    assert with_causal(pad, 4, 4).shape == (1, 1, 4, 4)
    bias = torch.full((1, 1, 1, 4), 0.5)
    combined = with_causal(bias, 2, 4)  # queries at positions 2 and 3
    assert combined.tolist() == [[[[0.5, 0.5, 0.5, -math.inf], [0.5, 0.5, 0.5, 0.5]]]]


@pytest.mark.parametrize("path", list(PATHS))
def test_is_causal_needs_q_len_at_most_k_len(path):
    q, k, v = rand_qkv(q_len=5, k_len=3)
    with pytest.raises(ValueError, match=r"is_causal needs q_len \(5\) <= k_len \(3\)"):
        PATHS[path](q, k, v, is_causal=True)


@pytest.mark.parametrize("n_kv_head", [4, 2, 1])
def test_kv_cache_decoding_with_is_causal_equals_full_causal_forward(n_kv_head):
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4, n_kv_head=n_kv_head).eval()
    x = torch.randn(2, 10, 32)
    with torch.no_grad():
        full, full_w = mha(x, x, x, is_causal=True)
        assert (full - mha(x, x, x, mask=causal_mask(10))[0]).abs().max().item() <= TOL
        for need_weights in (True, False):
            cache = KVCache()
            steps = [mha(x[:, :3], x[:, :3], x[:, :3], kv_cache=cache, is_causal=True, need_weights=need_weights)[0]]
            for t in range(3, 10, 2):  # two new tokens at a time: q_len 2 < k_len
                chunk = x[:, t : t + 2]
                out, w = mha(chunk, chunk, chunk, kv_cache=cache, is_causal=True, need_weights=need_weights)
                if need_weights:
                    assert (w - full_w[:, :, t : t + 2, : t + 2]).abs().max().item() <= TOL
                steps.append(out)
            assert (torch.cat(steps, dim=1) - full).abs().max().item() <= TOL


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("n_kv_head", [6, 3, 1])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_fully_masked_rows_are_zero_in_the_optimized_path(grad, n_kv_head, kind):
    q, k, v = rand_qkv(batch=2, n_head=6, n_kv_head=n_kv_head, q_len=5, k_len=5)
    mask = causal_mask(5) & padding_mask([5, 3], 5, side="left")  # batch 1: rows 0 and 1 see only pads
    if kind == "float":
        mask = mask_to_additive(mask, torch.float32)
    if grad:
        q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    with torch.set_grad_enabled(grad):
        out, w = scaled_dot_product_attention(q, k, v, mask=mask)
        fused = fused_attention(q, k, v, mask=mask)
        causal_too = scaled_dot_product_attention(q, k, v, mask=mask, is_causal=True)[0]
    for o in (out, fused, causal_too):
        assert not torch.isnan(o).any()
        assert torch.equal(o[1, :, :2], torch.zeros(6, 2, 16))
    assert torch.equal(w[1, :, :2], torch.zeros(6, 2, 5))
    assert torch.allclose(w[1, :, 2:].sum(-1), torch.ones(6, 3), atol=row_sum_tol(5), rtol=0)
    live = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=n_kv_head != 6)
    assert (out[0] - live[0]).abs().max().item() <= TOL
    assert (out[1, :, 2:] - live[1, :, 2:]).abs().max().item() <= TOL
    assert (fused - out).abs().max().item() <= TOL
    if grad:
        (out.square().sum() + w.sum()).backward()
        assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
        assert torch.equal(q.grad[1, :, :2], torch.zeros(6, 2, 16))  # dead rows pass no gradient back


def test_gradients_match_torch_through_the_inspectable_path():
    q, k, v = rand_qkv(n_head=6, n_kv_head=2, q_len=8, k_len=8)
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    theirs = [t.clone().requires_grad_() for t in (q, k, v)]
    mask = padding_mask([8, 6], 8)
    out, _ = scaled_dot_product_attention(*ours, mask=mask, is_causal=True, scale=0.3)
    ref = F.scaled_dot_product_attention(*theirs, attn_mask=mask & causal_mask(8), scale=0.3, enable_gqa=True)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    ref.backward(grad_out)
    for a, b in zip(ours, theirs, strict=True):
        assert (a.grad - b.grad).abs().max().item() <= TOL


@pytest.mark.parametrize("grad", [False, True])
def test_dropout_drops_weights_and_output_follows_them(grad):
    q, k, v = rand_qkv(n_head=4, n_kv_head=2, q_len=16, k_len=16)
    plain_w = scaled_dot_product_attention(q, k, v, is_causal=True)[1]
    if grad:
        q = q.clone().requires_grad_()
    with torch.set_grad_enabled(grad):
        torch.manual_seed(0)
        out, w = scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.5)
    kept = w != 0
    live = plain_w != 0
    assert 0.3 < (kept & live).sum() / live.sum() < 0.7  # about half the live weights dropped
    assert torch.equal(w[kept], 2 * plain_w[kept])  # the rest scaled by 1/(1-p) = 2: the same softmax, exact
    assert (out - w @ repeat_kv(v, 2)).abs().max().item() <= TOL
    if grad:
        out.sum().backward()  # no "modified by an inplace operation" error
        assert torch.isfinite(q.grad).all()


def test_masked_softmax_in_place_or_not():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 3, 40, 300, generator=g)
    scores[0, 1, 5] = float("-inf")
    scores[1, :, :, 7:] = float("-inf")
    expected = scores.softmax(-1).nan_to_num(0.0)
    kept = scores.clone()
    assert torch.equal(masked_softmax(scores), expected)
    assert torch.equal(scores, kept)  # not in place by default
    live = torch.randn(2, 3, 40, 300, generator=g)
    live_kept = live.clone()
    assert torch.equal(masked_softmax(live), live_kept.softmax(-1))
    assert torch.equal(live, live_kept)  # nor when no row is dead
    dead = torch.zeros(2, 3, 40, dtype=torch.bool)
    dead[0, 1, 5] = True
    inplace = masked_softmax(scores, dead, inplace=True)
    assert inplace.data_ptr() == scores.data_ptr()  # the copy it saves
    assert torch.equal(inplace, expected)


@pytest.mark.parametrize("n_kv_head", [6, 3, 1])
def test_grouped_scores_and_values_equal_repeated_kv(n_kv_head):
    q, k, v = rand_qkv(n_head=6, n_kv_head=n_kv_head, q_len=5, k_len=9)
    n_rep = 6 // n_kv_head
    scores = attention_scores(q, k, 0.25)
    assert scores.shape == (2, 6, 5, 9)
    assert (scores - q @ repeat_kv(k, n_rep).transpose(-2, -1) * 0.25).abs().max().item() <= TOL
    weights = scores.softmax(-1)
    out = weighted_values(weights, v)
    assert out.shape == (2, 6, 5, 16)
    assert (out - weights @ repeat_kv(v, n_rep)).abs().max().item() <= TOL


def test_on_qkv_sees_the_tensors_that_enter_the_softmax():
    torch.manual_seed(0)
    mha = MultiHeadAttention(24, 6, n_kv_head=2).eval()
    x = torch.randn(1, 5, 24)
    seen = []
    _, w = mha(x, x, x, is_causal=True, on_qkv=lambda q, k, v: seen.append((q, k, v)))
    ((q, k, v),) = seen
    assert q.shape == (1, 6, 5, 4) and k.shape == v.shape == (1, 2, 5, 4)
    assert torch.equal(w, scaled_dot_product_attention(q, k, v, is_causal=True)[1])


PATH_TOL = TOL  # the inspectable path against the fused one: two routes (tests/tolerances.py)


def qkv(seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, N_HEAD, Q_LEN, HEAD_DIM, generator=g)
    k = torch.randn(B, N_KV_HEAD, K_LEN, HEAD_DIM, generator=g)
    v = torch.randn(B, N_KV_HEAD, K_LEN, HEAD_DIM, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def inspectable(q, k, v, mask):
    return scaled_dot_product_attention(q, k, v, mask)[0]


BOTH_PATHS = [inspectable, fused_attention]  # the inspectable and the fused path, called alike


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.int32])
@pytest.mark.parametrize("path", BOTH_PATHS)
def test_integer_mask_is_a_type_error_on_both_paths(path, dtype):
    q, k, v = qkv()
    mask = causal_mask(Q_LEN, K_LEN).to(dtype)  # 0/1, once silently added to the scores
    with pytest.raises(TypeError, match=rf"{dtype}.*bool keep-mask \(True = may attend\).*additive float mask"):
        path(q, k, v, mask)


@pytest.mark.parametrize("path", BOTH_PATHS)
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
    # the same softmax: exp(finfo.min − max) and exp(−inf) are both exactly 0, so every sum is the same
    assert torch.equal(w_hf, w_inf)
    assert torch.equal(out_hf, out_inf)
    assert (fused_attention(q, k, v, hf) - out_inf).abs().max().item() <= PATH_TOL


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_finfo_min_in_the_model_dtype_on_both_paths(dtype):
    q, k, v = qkv(dtype=dtype)
    mask = hf_mask(dtype)
    slow, weights = scaled_dot_product_attention(q, k, v, mask)
    fast = fused_attention(q, k, v, mask)
    assert weights[:, :, 1].abs().max().item() == 0.0
    assert slow[:, :, 1].abs().max().item() == 0.0 and fast[:, :, 1].abs().max().item() == 0.0


def test_masked_softmax_finds_finfo_min_rows_by_itself():
    scores = torch.tensor([[1.0, 2.0], [torch.finfo(torch.float32).min] * 2])
    assert masked_softmax(scores)[1].tolist() == [0.0, 0.0]


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
    for path in BOTH_PATHS:
        assert (path(q, k, v, keys) - path(q, k, v, as_4d)).abs().max().item() == 0.0
    assert check_mask(keys, (B, N_HEAD, Q_LEN, K_LEN)).shape == (1, K_LEN)


@pytest.mark.parametrize("shape", REJECTED_SHAPES, ids=str)
@pytest.mark.parametrize("path", BOTH_PATHS)
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


def test_batch_padding_keep_drives_attention_with_no_dead_rows():
    q, k, v = (torch.randn(2, 4, 5, 8) for _ in range(3))
    keep = batch_padding_keep([5, 2], 5, side="left", causal=True)[:, None]  # (B, 1, T, T)
    slow, weights = scaled_dot_product_attention(q, k, v, keep)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 4, 5))
    assert (slow - fused_attention(q, k, v, keep)).abs().max().item() <= PATH_TOL


@pytest.mark.parametrize("n_kv_head", [4, 2, 1])
def test_both_paths_agree_with_learned_sinks_on_every_mask(n_kv_head):
    from attnviz.core.attention import fused_attention

    g = torch.Generator().manual_seed(7)
    q = torch.randn(2, 4, 6, 8, generator=g)
    k, v = torch.randn(2, n_kv_head, 6, 8, generator=g), torch.randn(2, n_kv_head, 6, 8, generator=g)
    sinks = torch.tensor([-2.0, 0.0, 1.0, 4.0])
    keep = torch.ones(6, 6, dtype=torch.bool).tril()
    keep[2] = False  # a row that sees nothing: all its weight goes to the sink, its output is 0
    for mask, causal in ((None, True), (keep, False)):
        out, weights = scaled_dot_product_attention(q, k, v, mask, is_causal=causal, sinks=sinks)
        assert torch.allclose(fused_attention(q, k, v, mask, is_causal=causal, sinks=sinks), out, atol=TOL, rtol=0)
        assert bool((weights.sum(dim=-1) < 1).all())  # every row gives the sink a share
    assert torch.equal(out[:, :, 2], torch.zeros(2, 4, 8))
    with pytest.raises(ValueError, match="one logit per head"):
        scaled_dot_product_attention(q, k, v, sinks=torch.zeros(3))

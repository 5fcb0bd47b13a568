"""MHA -> GQA/MQA by mean-pooling K/V heads: exact where it must be, hand-checked where it is small."""

import math

import pytest
import torch

from attnviz.core.attention import MultiHeadAttention
from attnviz.core.masks import causal_mask
from attnviz.labs.kv.gqa import (
    JS_MAX,
    convert_to_gqa,
    default_groups,
    gqa_whatif,
    js_divergence,
    kv_bytes_per_token,
    pool_heads,
)
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.models.source import LayerInput

TEXT = "the quick brown fox jumps over the lazy dog while the cat watches the bird on the fence"


def layer_input(mha: MultiHeadAttention, q_len: int = 6, mask=None, seed: int = 0) -> LayerInput:
    hidden = torch.randn(1, q_len, mha.d_model, generator=torch.Generator().manual_seed(seed))  # (1, T, d_model)
    scale = 1 / math.sqrt(mha.head_dim)
    return LayerInput(0, mha, hidden, mask, rotate=None, scale=scale, tokens=[], n_input=q_len)


def test_pooled_weights_by_hand_on_a_tiny_layer():
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=4, n_head=4, n_kv_head=4, head_dim=1)
    with torch.no_grad():
        mha.w_k.weight.copy_(torch.tensor([[1.0, 0, 0, 0], [3.0, 0, 0, 0], [0, 2.0, 0, 0], [0, 4.0, 0, 8.0]]))
        mha.w_k.bias.copy_(torch.tensor([1.0, 2.0, 3.0, 5.0]))
        mha.w_v.weight.copy_(torch.arange(16.0).view(4, 4))
        mha.w_v.bias.copy_(torch.tensor([0.0, 1.0, 2.0, 3.0]))
    gqa = convert_to_gqa(mha, 2)
    assert gqa.n_kv_head == 2 and gqa.n_head == 4 and gqa.head_dim == 1
    assert gqa.w_k.weight.tolist() == [[2.0, 0, 0, 0], [0, 3.0, 0, 4.0]]
    assert gqa.w_k.bias.tolist() == [1.5, 4.0]
    assert gqa.w_v.weight.tolist() == [[2.0, 3.0, 4.0, 5.0], [10.0, 11.0, 12.0, 13.0]]
    assert gqa.w_v.bias.tolist() == [0.5, 2.5]
    assert torch.equal(gqa.w_q.weight, mha.w_q.weight) and torch.equal(gqa.w_o.bias, mha.w_o.bias)
    mqa = convert_to_gqa(mha, 1)
    assert mqa.w_k.weight.tolist() == [[1.0, 1.5, 0, 2.0]] and mqa.w_k.bias.tolist() == [2.75]


def test_pool_heads_keeps_head_dim_rows_together():
    weight = torch.arange(8.0).view(8, 1)  # 4 heads of head_dim 2: rows (0,1) (2,3) (4,5) (6,7)
    assert pool_heads(weight, 4, 2).flatten().tolist() == [1.0, 2.0, 5.0, 6.0]
    assert pool_heads(weight, 4, 1).flatten().tolist() == [3.0, 4.0]


def test_same_n_kv_head_is_an_exact_copy():
    torch.manual_seed(1)
    mha = MultiHeadAttention(16, 4).eval()
    frame = gqa_whatif(layer_input(mha), groups=(1,))
    assert (frame["js_nats"] == 0).all() and (frame["output_rel_change"] == 0).all()
    assert (frame["kv_saving"] == 1).all()


def test_pooling_heads_that_are_already_equal_within_groups_is_exact():
    torch.manual_seed(2)
    mha = MultiHeadAttention(16, 4, bias=True).eval()
    with torch.no_grad():
        for proj in (mha.w_k, mha.w_v):
            heads = proj.weight.view(4, 4, 16)
            heads[1], heads[3] = heads[0], heads[2]
            bias = proj.bias.view(4, 4)
            bias[1], bias[3] = bias[0], bias[2]
    frame = gqa_whatif(layer_input(mha, mask=causal_mask(6, 6)), groups=(2,))
    assert frame["js_nats"].max() < 1e-12
    assert frame["output_rel_change"].max() < 1e-6
    assert frame["kv_head"].tolist() == [0, 0, 1, 1]


def test_converted_layer_is_gqa_with_repeated_pooled_heads():
    """The converted layer equals an MHA layer whose K/V heads are the pooled ones, repeated per group."""
    torch.manual_seed(3)
    mha = MultiHeadAttention(24, 6).eval()
    gqa = convert_to_gqa(mha, 2)
    repeated = MultiHeadAttention(24, 6).eval()
    with torch.no_grad():
        repeated.load_state_dict(mha.state_dict())
        for dst, src in ((repeated.w_k, gqa.w_k), (repeated.w_v, gqa.w_v)):
            dst.weight.copy_(src.weight.view(2, 1, 4, 24).expand(2, 3, 4, 24).reshape(24, 24))
            dst.bias.copy_(src.bias.view(2, 1, 4).expand(2, 3, 4).reshape(24))
    x = torch.randn(1, 5, 24)
    out_gqa, w_gqa = gqa(x, x, x)
    out_rep, w_rep = repeated(x, x, x)
    assert (w_gqa - w_rep).abs().max().item() < 1e-6
    assert (out_gqa - out_rep).abs().max().item() < 1e-6


def test_js_lies_in_zero_to_ln2_and_reaches_both_ends():
    p = torch.softmax(torch.randn(3, 5, 7), -1)
    q = torch.softmax(torch.randn(3, 5, 7), -1)
    js = js_divergence(p, q)
    assert js.shape == (3, 5) and (js >= 0).all() and (js <= JS_MAX).all()
    assert torch.allclose(js, js_divergence(q, p))
    assert js_divergence(p, p).abs().max().item() < 1e-12
    disjoint = js_divergence(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]))
    assert abs(float(disjoint) - math.log(2)) < 1e-12


def test_whatif_on_the_embedded_model_mqa_saves_n_head_times():
    model = EmbeddedModel(EmbeddedConfig(d_model=64, n_head=8, n_layer=2, causal=True))
    frame = gqa_whatif(model.attention_layer(TEXT, 32, 1))
    assert default_groups(8) == (1, 2, 4, 8)
    assert sorted(frame["n_kv_head"].unique()) == [1, 2, 4, 8]
    assert len(frame) == 4 * 8
    assert frame["js_nats"].between(0, JS_MAX).all() and frame["js_max_nats"].between(0, JS_MAX).all()
    mqa = frame[frame["n_kv_head"] == 1]
    assert (mqa["kv_saving"] == 8).all()
    assert (mqa["kv_bytes_per_token"] == 2 * 8 * 4).all() and (mqa["kv_bytes_per_token_before"] == 2 * 64 * 4).all()
    exact = frame[frame["group"] == 1]
    assert (exact["js_nats"] == 0).all() and (exact["output_rel_change"] == 0).all()
    assert (mqa["output_rel_change"] > 0).all()


def test_an_existing_gqa_layer_pools_further_and_rejects_non_divisors():
    mha = MultiHeadAttention(32, 8, n_kv_head=4, bias=False)
    assert kv_bytes_per_token(mha) == 2 * 4 * 4 * 4
    mqa = convert_to_gqa(mha, 1)
    assert mqa.w_k.bias is None and kv_bytes_per_token(mqa) == 2 * 4 * 4
    assert torch.allclose(mqa.w_k.weight, mha.w_k.weight.view(4, 4, 32).mean(0))
    with pytest.raises(ValueError, match=r"n_kv_head \(3\) must divide the layer's n_kv_head \(4\)"):
        convert_to_gqa(mha, 3)
    with pytest.raises(ValueError, match="group size 3"):
        gqa_whatif(layer_input(mha), groups=(3,))

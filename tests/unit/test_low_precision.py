"""bfloat16 and float16 through attnviz's own attention and the labs built on it: the model's dtype where the model
computes, float32 (or float64 on the CPU) where attnviz accumulates, and exactly transformers' eager formula.

transformers' eager attention: ``scores = q @ kᵀ * scale + mask`` in the model's dtype, then
``softmax(scores, dtype=float32).to(q.dtype)``, then ``weights @ v``. Our inspectable path does the same, so on
bfloat16 or float16 tensors it gives the same weights bit for bit on the CPU; float32 takes the plain softmax it
always did. Tolerances: tests/tolerances.py.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from attnviz.core.attention import (
    MultiHeadAttention,
    _softmax,
    fused_attention,
    reduction_dtype,
    repeat_kv,
    scaled_dot_product_attention,
    softmax_dtype,
)
from attnviz.core.devices import dtype_name
from attnviz.core.head_stats import JS_MAX, js_divergence
from attnviz.core.masks import causal_mask
from attnviz.core.value_norms import projection_factors, value_norms
from attnviz.figures.parity import make_parity_figure
from attnviz.labs.kv.gqa import gqa_whatif
from attnviz.labs.walkthrough.steps import walk
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.models.record import PARITY_TOLERANCES, Parity
from attnviz.models.source import LayerInput
from tests.tolerances import tolerance

LOW = [torch.bfloat16, torch.float16]


def qkv(dtype: torch.dtype, n_head: int = 4, n_kv_head: int = 2, n_tokens: int = 7, head_dim: int = 8, seed: int = 0):
    """q (1, n_head, T, hd), k and v (1, n_kv_head, T, hd) in ``dtype``, scores of a few units as a model's are."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, h, n_tokens, head_dim, generator=g) * 2 for h in (n_head, n_kv_head, n_kv_head))
    return q.to(dtype), k.to(dtype), v.to(dtype)


def eager(q, k, v, keep: torch.Tensor | None, scale: float):
    """transformers' ``eager_attention_forward`` (Llama's), its additive mask at the dtype's minimum."""
    n_rep = q.shape[1] // k.shape[1]
    k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
    scores = torch.matmul(q, k.transpose(2, 3)) * scale
    if keep is not None:
        scores = scores + torch.zeros_like(scores).masked_fill(~keep, torch.finfo(q.dtype).min)
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(weights, v), weights


def test_the_softmax_accumulates_in_float32_only_below_it():
    assert softmax_dtype(torch.bfloat16) == softmax_dtype(torch.float16) == torch.float32
    assert softmax_dtype(torch.float32) == torch.float32 and softmax_dtype(torch.float64) == torch.float64
    scores = torch.randn(3, 5, 9)
    assert torch.equal(_softmax(scores.clone(), overwrite=True), scores.softmax(dim=-1))  # float32: as before
    low = scores.bfloat16()
    weights = _softmax(low.clone(), overwrite=True)
    assert weights.dtype == torch.bfloat16
    assert torch.equal(weights, torch.softmax(low, dim=-1, dtype=torch.float32).bfloat16())


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("causal", [False, True])
def test_our_attention_is_transformers_eager_attention_in_the_same_dtype(dtype, causal):
    q, k, v = qkv(dtype)
    keep = causal_mask(7, 7) if causal else None
    out, weights = scaled_dot_product_attention(q, k, v, keep, scale=8**-0.5)
    out_ref, weights_ref = eager(q, k, v, keep, 8**-0.5)
    assert out.dtype == weights.dtype == dtype
    assert float((weights - weights_ref).abs().max()) <= tolerance("cpu", dtype_name(dtype), "parity")
    assert float((out - out_ref).abs().max()) <= tolerance("cpu", dtype_name(dtype), "parity") * 8
    rows = weights.float().sum(dim=-1)
    assert float((rows - 1).abs().max()) <= torch.finfo(dtype).eps


@pytest.mark.parametrize("dtype", LOW)
def test_a_fully_masked_row_gives_zeros_whatever_dtype_hid_its_keys(dtype):
    """A float32 mask at float32's minimum becomes -inf in float16 (and bfloat16): still a hidden key, still a
    dead row with zero weights and zero output, on both paths, as in float32."""
    q, k, v = qkv(dtype, n_tokens=5)
    for mask in (
        torch.zeros(5, 5).index_fill_(0, torch.tensor([2]), torch.finfo(torch.float32).min),  # float32, additive
        torch.zeros(5, 5, dtype=dtype).index_fill_(0, torch.tensor([2]), torch.finfo(dtype).min),  # the model's
        torch.ones(5, 5, dtype=torch.bool).index_fill_(0, torch.tensor([2]), False),
    ):
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        fused = fused_attention(q, k, v, mask)
        assert not weights.isnan().any() and not out.isnan().any() and not fused.isnan().any()
        assert (weights[..., 2, :] == 0).all() and (out[..., 2, :] == 0).all() and (fused[..., 2, :] == 0).all()
        live = [0, 1, 3, 4]
        assert float((weights[..., live, :].float().sum(dim=-1) - 1).abs().max()) <= torch.finfo(dtype).eps
        assert float((fused - out).abs().max()) <= 8 * torch.finfo(dtype).eps  # torch's fused kernel rounds its own


@pytest.mark.parametrize("dtype", LOW)
def test_learned_sinks_in_low_precision_take_the_rest_of_each_row(dtype):
    q, k, v = qkv(dtype, n_tokens=6)
    sinks = torch.tensor([0.0, 1.0, -1.0, 2.0])
    mask = causal_mask(6, 6).index_fill(0, torch.tensor([3]), False)
    _, weights = scaled_dot_product_attention(q, k, v, mask, sinks=sinks)
    scores = torch.cat(
        [(q @ repeat_kv(k, 2).transpose(-2, -1)).float() * 8**-0.5, sinks.view(1, 4, 1, 1).expand(1, 4, 6, 1)], -1
    )
    scores[..., :6] = scores[..., :6].masked_fill(~mask, -math.inf)
    expected = scores.softmax(dim=-1)[..., :6]  # (1, 4, 6, 6) in float32
    assert weights.dtype == dtype and (weights[..., 3, :] == 0).all()
    assert float((weights.float() - expected).abs().max()) <= torch.finfo(dtype).eps


def test_comparisons_reduce_in_float64_on_the_cpu_and_float32_elsewhere():
    assert reduction_dtype("cpu") == torch.float64
    assert reduction_dtype("cuda:1") == reduction_dtype(torch.device("mps")) == torch.float32
    p = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.bfloat16)
    q = torch.tensor([[0.0, 0.5, 0.5]], dtype=torch.bfloat16)
    js = js_divergence(p, q)
    assert js.dtype == torch.float64 and float(js) == pytest.approx(0.5 * math.log(2), abs=1e-12)
    assert float(js_divergence(p, p)) == 0.0 and float(js) <= JS_MAX


def test_value_norms_of_low_precision_weights_are_float32_and_exact():
    g = torch.Generator().manual_seed(3)
    blocks = torch.randn(4, 8, 32, generator=g).bfloat16()  # W_O^h of a bfloat16 model
    v = torch.randn(2, 5, 8, generator=g).bfloat16()  # (n_kv_head, k_len, head_dim)
    factors = projection_factors(blocks)
    assert factors.dtype == torch.float32 and factors.device == blocks.device
    norms = value_norms(v, factors)
    expected = torch.linalg.vector_norm(v.double().repeat_interleave(2, dim=0) @ blocks.double(), dim=-1)
    assert norms.dtype == torch.float32
    assert float(((norms.double() - expected) / expected).abs().max()) <= 1e-6


def low_layer(dtype: torch.dtype, causal: bool = True, n_tokens: int = 6) -> LayerInput:
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4, 2).eval().to(dtype)
    hidden = torch.randn(1, n_tokens, 32).to(dtype)
    mask = causal_mask(n_tokens, n_tokens) if causal else None
    return LayerInput(0, mha, hidden, mask, rotate=None, scale=8**-0.5, tokens=[], n_input=n_tokens)


@pytest.mark.parametrize("dtype", LOW)
def test_the_walkthrough_runs_in_the_layers_dtype_and_composes_exactly(dtype):
    walked = walk(low_layer(dtype))
    assert walked.output_diff == 0.0 and walked.weights_diff == 0.0
    weights = walked.step("softmax").tensors["weights"]
    assert weights.dtype == walked.output.dtype == dtype
    assert float((weights.float().sum(dim=-1) - 1).abs().max()) <= torch.finfo(dtype).eps


@pytest.mark.parametrize("dtype", LOW)
def test_the_gqa_whatif_runs_in_the_layers_dtype(dtype):
    frame = gqa_whatif(low_layer(dtype))
    assert list(frame["group"].unique()) == [1, 2]
    same = frame[frame["group"] == 1]
    assert (same["js_nats"] == 0).all() and (same["output_rel_change"] == 0).all()
    assert (frame["kv_bytes_per_token_before"] == 2 * 2 * 8 * 2).all()  # K and V, 2 heads of 8, 2 bytes a value
    assert (frame["js_nats"] >= 0).all() and (frame["js_max_nats"] <= JS_MAX).all()


def test_the_embedded_model_runs_caches_and_decodes_in_bfloat16():
    model = EmbeddedModel(EmbeddedConfig(d_model=32, n_head=4, n_layer=2, causal=True)).to(torch.bfloat16)
    record = model.run("the cat sat on the mat", 8)
    assert record.q_len == 6 and record.outputs.hidden.dtype == torch.float32  # records keep what they kept
    assert float((record.weights(0, None).sum(dim=-1) - 1).abs().max()) <= 1e-5  # softmax in float32
    cached = model.prefill_kv("the cat sat on the mat", 6)
    assert all(k.dtype == v.dtype == torch.bfloat16 for k, v in cached.layers)  # the model's own dtype
    assert model.prefill_kv("the cat sat", 3, dtype=torch.float32).layers[0][0].dtype == torch.float32
    for use_cache in (True, False):
        decoder = model.greedy_decoder("the cat sat", use_cache=use_cache, vocab=16)
        assert all(0 <= decoder.step() < 16 for _ in range(3))


def test_parity_counts_as_equal_within_its_dtypes_tolerance_and_draws_it():
    assert PARITY_TOLERANCES == {"float32": 1e-5, "bfloat16": 2**-7, "float16": 2**-10}
    diff = torch.full((2, 4), 3e-3)
    parity = Parity(torch.zeros(2, 4, 3, 3), torch.zeros(2, 4, 3, 3), diff, keys=[], tolerance=2**-7)
    assert parity.matches and not Parity(parity.ours, parity.theirs, diff, keys=[]).matches  # float32's 1e-5
    figure = make_parity_figure(diff, parity.tolerance)
    stops = [stop for stop, _ in figure.data[0].colorscale]
    assert min(stops) >= 0.0 and max(stops) <= 1.0 and figure.data[0].zmax >= math.log10(2**-7)


def test_the_tolerances_docs_devices_states_are_the_tests():
    """docs/devices.md's table is tests/tolerances.py's, row by row."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "devices.md").read_text()
    columns = (("weights", "max_weight", "pooled"), ("entropy",), ("parity",), ("kv",))
    rows = re.findall(r"^\| (cpu|cuda, mps) \| (\w+) \|(.+)\|$", text, re.MULTILINE)
    assert len(rows) == 6
    for kinds, dtype, cells in rows:
        values = [float(re.findall(r"[\d.]+(?:e-?\d+)?", cell)[-1]) for cell in cells.split("|")]
        for kind in kinds.split(", "):
            for value, names in zip(values, columns, strict=True):
                for name in names:
                    assert value == pytest.approx(tolerance(kind, dtype, name), rel=0.02), (kind, dtype, name)

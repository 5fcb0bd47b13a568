"""The fused statistics route against the reference capture: every row statistic and the output, mask by mask.

Both routes compute in float32 from the same q, k and v, but not the same arithmetic (torch's fused kernel blocks its
sums its own way, and the route reads entropy as lse - E[s]), so they agree to a derived bound, not exactly
(STYLE §22, tests/tolerances.py). With s the largest |score| of a case, hd the head size and k the keys a row sees:

- a score q·k·scale sums hd products: off by derived_bound(s, hd); a row's lse sums k exponentials in another order
  and merges parts: off by derived_bound(s + |lse|, k). A weight w = exp(s - lse) moves by w times the sum of the
  two, at most that sum: the bound of max, self, previous- and first-token, sink and low-norm weights;
- entropy = lse - scale·q·(Σ w k): the weighted mean of k sums k terms of each of hd components, then a dot product:
  derived_bound(s, k·hd) beyond the lse's own bound;
- mean distance: terms up to k positions summed over k keys, derived_bound(k, k), plus every weight's relative
  error times a distance of at most k;
- the output: values up to |v| summed over k keys, derived_bound(|v|, k), plus the weights' error times |v|.
"""

import math

import pytest
import torch

from attnviz.core.capture import CaptureSession, capture_attention
from attnviz.core.capture import fused as fused_module
from attnviz.core.capture.fused import fused_attention, fused_route, fused_segments
from attnviz.core.masks import KeyRanges
from tests.tolerances import EPS, derived_bound

MASKS = {
    "causal": lambda n: KeyRanges.causal(n),
    "full": lambda n: KeyRanges.full(n),
    "key padding": lambda n: KeyRanges.span(n, 0, n - 6),
    "right-padded causal": lambda n: KeyRanges.causal(n, end=n - 6),
}
WEIGHTS = ("max_weight", "first_token_weight", "prev_token_weight", "self_weight", "sink_weight", "low_norm_weight")


def inputs(n_head=6, n_kv_head=3, length=41, head_dim=16, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n_head, length, head_dim, generator=g) * 2
    k = torch.randn(n_kv_head, length, head_dim, generator=g) * 2
    v = torch.randn(n_kv_head, length, head_dim, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def bounds(q, k, v, reference_rows) -> dict[str, float]:
    """Each quantity's bound for these inputs (the module's derivation)."""
    head_dim, k_len = q.shape[-1], k.shape[1]
    scale = head_dim**-0.5
    s = float((q.float().abs().amax() * k.float().abs().amax()) * head_dim * scale)  # |q·k·scale| at most
    lse = float(reference_rows["lse"].nan_to_num(0.0, 0.0, 0.0).abs().max())
    weight = derived_bound("float32", s, head_dim) + derived_bound("float32", s + lse, k_len)
    v_max = float(v.float().abs().max())
    return {
        **dict.fromkeys(WEIGHTS, weight),
        "lse": derived_bound("float32", s + lse, k_len),
        "entropy": derived_bound("float32", s + lse, k_len) + derived_bound("float32", s, k_len * head_dim),
        "mean_distance": derived_bound("float32", k_len, k_len) + k_len * weight,
        "out": derived_bound("float32", v_max, k_len) + v_max * weight,
    }


def compare(q, k, v, keys, sinks=None, out_factors=None):
    scale = q.shape[-1] ** -0.5
    ref_out, ref = capture_attention(
        q, k, v, keys, scale=scale, bin_size=4, sinks=sinks, out_factors=out_factors, keep_qk=False
    )
    out, fused = fused_attention(q, k, v, keys, scale=scale, sinks=sinks, out_factors=out_factors)
    assert fused.route == "fused" and ref.route == "reference"
    assert set(fused.rows) == set(ref.rows)
    limits = bounds(q, k, v, ref.rows)
    for name, expected in ref.rows.items():
        got = fused.rows[name]
        assert torch.equal(got.isnan(), expected.isnan()), name
        assert torch.equal(torch.isneginf(got), torch.isneginf(expected)), name
        finite = torch.isfinite(expected)
        worst = float((got[finite] - expected[finite]).abs().max()) if bool(finite.any()) else 0.0
        assert worst <= limits[name], f"{name}: {worst:.3g} > {limits[name]:.3g}"
    assert out.dtype == q.dtype
    if q.dtype == torch.float32:
        assert float((out - ref_out).abs().max()) <= limits["out"]
    else:  # each route's float32 output rounded to the dtype: one rounding step apart at most
        step = EPS[str(q.dtype).removeprefix("torch.")] * float(ref_out.float().abs().max())
        assert float((out.float() - ref_out.float()).abs().max()) <= limits["out"] + step
    return fused


@pytest.mark.parametrize("mask", list(MASKS))
def test_fused_rows_equal_the_reference(mask):
    q, k, v = inputs()
    compare(q, k, v, MASKS[mask](41))


@pytest.mark.parametrize("n_kv_head", [6, 3, 1])  # MHA, GQA, MQA
def test_grouped_heads(n_kv_head):
    q, k, v = inputs(n_kv_head=n_kv_head)
    compare(q, k, v, KeyRanges.causal(41))


@pytest.mark.parametrize("mask", ["causal", "full"])
def test_rows_across_chunks(monkeypatch, mask):
    """Chunks of 8 rows: the keys before and after each chunk go through the fused kernel, its block explicitly."""
    monkeypatch.setattr(fused_module, "FUSED_CHUNK_ROWS", 8)
    q, k, v = inputs(length=45)
    compare(q, k, v, MASKS[mask](45))


def test_one_token():
    q, k, v = inputs(length=1)
    fused = compare(q, k, v, KeyRanges.causal(1))
    assert math.isnan(float(fused.rows["prev_token_weight"][0, 0]))


def test_fully_masked_rows():
    q, k, v = inputs(length=12)
    fused = compare(q, k, v, KeyRanges.span(12, 0, 0))
    assert torch.isneginf(fused.rows["lse"]).all() and (fused.rows["entropy"] == 0).all()


def test_bfloat16_inputs():
    q, k, v = inputs(dtype=torch.bfloat16)
    compare(q, k, v, KeyRanges.causal(41))


def test_sinks_and_value_norms():
    q, k, v = inputs()
    g = torch.Generator().manual_seed(1)
    sinks = torch.randn(6, generator=g) * 2
    factors = torch.randn(6, 16, 8, generator=g)
    v[:, ::5] *= 0.01  # every fifth key's value is small: small-norm keys exist
    fused = compare(q, k, v, KeyRanges.causal(41), sinks=sinks, out_factors=factors)
    assert "sink_weight" in fused.rows and bool((fused.rows["low_norm_weight"][:, 1:] > 0).all())


def test_which_masks_take_the_fused_route():
    assert fused_segments(KeyRanges.causal(10)) == [(0, 10, 10, True)]
    assert fused_segments(KeyRanges.causal(10, end=7)) == [(0, 7, 7, True), (7, 10, 7, False)]
    assert fused_segments(KeyRanges.span(10, 0, 7)) == [(0, 10, 7, False)]
    for keys in (KeyRanges.causal(10, window=3), KeyRanges.causal(10, start=2), KeyRanges.full(4, 10)):
        assert fused_segments(keys) is None  # a window, left padding, queries that are not the keys: reference
    cpu = torch.device("cpu")
    assert fused_route(KeyRanges.causal(10), None, cpu)
    assert not fused_route(KeyRanges.causal(10), 30.0, cpu)  # soft-capping: reference
    assert not fused_route(KeyRanges.causal(10), None, torch.device("meta"))  # not the CPU: reference
    with pytest.raises(ValueError, match="reference"):
        fused_attention(*inputs(length=10), KeyRanges.causal(10, window=3), scale=0.25)


@pytest.mark.slow
def test_a_statistics_session_takes_the_route_per_layer_and_each_text_gets_what_it_gets_alone(monkeypatch):
    """A padded batch (right padding, causal) through a statistics session with the fused route on: each sequence's
    real rows equal that sequence run alone; a layer whose mask the kernel cannot apply takes the reference; a
    session that is not a statistics pass, or a statistics pass by default, never takes the fused route."""
    q, k, v = inputs(n_head=4, n_kv_head=2, length=20)
    by_default = CaptureSession(1, 20, 4, keep_qk=False, statistics_only=True)
    by_default.attend(q[None], k[None], v[None], [KeyRanges.causal(20)], scale=0.25)
    assert by_default.layers[0][0].route == "reference"  # fused_module.STATISTICS_ROUTE: measured slower
    monkeypatch.setattr(fused_module, "STATISTICS_ROUTE", "fused")
    lengths = (20, 13)
    batch = CaptureSession(2, 20, 8, keep_qk=False, statistics_only=True)
    batch.attend(q[None].repeat(2, 1, 1, 1), k[None].repeat(2, 1, 1, 1), v[None].repeat(2, 1, 1, 1),
                 [KeyRanges.causal(20, end=n) for n in lengths], scale=0.25)  # fmt: skip
    batch.attend(q[None].repeat(2, 1, 1, 1), k[None].repeat(2, 1, 1, 1), v[None].repeat(2, 1, 1, 1),
                 [KeyRanges.causal(20, window=4)] * 2, scale=0.25)  # fmt: skip
    assert [[layer.route for layer in sequence] for sequence in batch.layers] == [["fused", "reference"]] * 2
    for b, n in enumerate(lengths):
        alone = CaptureSession(1, n, 4, keep_qk=False, statistics_only=True)
        alone.attend(q[None, :, :n], k[None, :, :n], v[None, :, :n], [KeyRanges.causal(n)], scale=0.25)
        for name, rows in alone.layers[0][0].rows.items():
            torch.testing.assert_close(batch.layers[b][0].rows[name][:, :n], rows, rtol=0, atol=0, equal_nan=True)
    default = CaptureSession(1, 20, 4, keep_qk=False)
    default.attend(q[None], k[None], v[None], [KeyRanges.causal(20)], scale=0.25)
    assert default.layers[0][0].route == "reference"


@pytest.mark.parametrize("mask", list(MASKS))
def test_the_reference_without_pooled_maps_has_the_same_rows(mask):
    """A statistics pass's reference (pooled=False) skips the maps and changes no row: the same arithmetic."""
    q, k, v = inputs()
    keys = MASKS[mask](41)
    factors = torch.randn(6, 16, 8, generator=torch.Generator().manual_seed(2))
    out, whole = capture_attention(q, k, v, keys, scale=0.25, bin_size=4, keep_qk=False, out_factors=factors)
    lean_out, lean = capture_attention(
        q, k, v, keys, scale=0.25, bin_size=4, keep_qk=False, out_factors=factors, pooled=False
    )
    assert torch.equal(out, lean_out) and lean.pooled_max.shape == (6, 0, 0) and lean.route == "reference"
    for name, rows in whole.rows.items():
        torch.testing.assert_close(lean.rows[name], rows, rtol=0, atol=0, equal_nan=True)

"""The chunked capture against the inspectable path that holds every weight: statistics, pooled maps, heads."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnviz.core.attention import scaled_dot_product_attention
from attnviz.core.capture import CaptureSession, capture_attention, pool_bin, pooled_counts, weights_window
from attnviz.core.capture import kernel as capture_kernel
from attnviz.core.capture import layer as capture_layer
from attnviz.core.head_stats import row_statistics
from attnviz.core.masks import KeyRanges
from tests.tolerances import bound, derived_bound

TOL = bound("attention")

MASKS = {
    "full": lambda n: KeyRanges.full(n),
    "causal": lambda n: KeyRanges.causal(n),
    "window 5": lambda n: KeyRanges.causal(n, window=5),
    "left-padded causal": lambda n: KeyRanges.causal(n, start=7),
    "right-padded encoder": lambda n: KeyRanges.span(n, 0, n - 6),
}


def inputs(n_head=6, n_kv_head=3, length=41, head_dim=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n_head, length, head_dim, generator=g) * 2
    k = torch.randn(n_kv_head, length, head_dim, generator=g) * 2
    v = torch.randn(n_kv_head, length, head_dim, generator=g)
    return q, k, v


def reference(q, k, v, keys):
    """Every weight at once: output (H, T, hd), weights (H, T, T)."""
    out, w = scaled_dot_product_attention(q[None], k[None], v[None], mask=keys.dense())
    return out[0], w[0]


def assert_close(ours, theirs, tol=TOL):
    """Equal to ``tol`` where defined, and NaN exactly where the other is."""
    assert torch.equal(torch.isnan(ours), torch.isnan(theirs))
    defined = ~torch.isnan(theirs)
    assert (ours[defined] - theirs[defined]).abs().max().item() <= tol


def pool(w, b, op):
    """(H, T, S) -> (H, ceil(T/b), ceil(S/b)) by max or sum over whole b x b bins (zero padding)."""
    T, S = w.shape[-2:]
    padded = F.pad(w, (0, -S % b, 0, -T % b))
    blocks = padded.view(w.shape[0], padded.shape[1] // b, b, padded.shape[2] // b, b)
    return blocks.amax(dim=(2, 4)) if op == "max" else blocks.sum(dim=(2, 4))


@pytest.fixture(params=[None, 1], ids=["one chunk", "many chunks"])
def chunking(request, monkeypatch):
    if request.param:  # chunks of a single pooled bin of rows: every boundary case at once
        monkeypatch.setattr(capture_kernel, "CHUNK_ELEMENTS", 1)


@pytest.mark.parametrize("bin_size", [1, 3, 8])
@pytest.mark.parametrize("mask", list(MASKS))
def test_capture_equals_every_weight_at_once(mask, bin_size, chunking):
    q, k, v = inputs()
    keys = MASKS[mask](q.shape[1])
    ref_out, ref_w = reference(q, k, v, keys)
    out, cap = capture_attention(q, k, v, keys, scale=16**-0.5, bin_size=bin_size)
    assert (out - ref_out).abs().max().item() <= TOL
    # statistics, on the rows that have a choice (row_statistics leaves the others NaN)
    expected = row_statistics(ref_w, keys.dense())
    live = ~torch.isnan(expected["entropy"])
    for name in ("entropy", "max_weight", "first_token_weight", "prev_token_weight", "self_weight"):
        assert_close(cap.rows[name][live], expected[name][live])
    distance = expected["mean_distance"][live]  # tokens: float32 rounding grows with the distance
    assert ((cap.rows["mean_distance"][live] - distance).abs() / distance.clamp_min(1)).max().item() <= TOL
    # pooled maps, NaN exactly where a bin sees nothing
    counts = pooled_counts(keys, bin_size)
    empty = counts == 0
    assert torch.equal(torch.isnan(cap.pooled_max[0]), empty)
    assert (cap.pooled_max.nan_to_num(0) - pool(ref_w, bin_size, "max")).abs().max().item() <= TOL
    mean = pool(ref_w, bin_size, "sum") / counts.clamp_min(1)
    assert (cap.pooled_mean.nan_to_num(0) - mean.masked_fill(empty, 0)).abs().max().item() <= TOL
    assert (
        cap.mean_pooled_max.nan_to_num(0) - pool(ref_w.mean(0, keepdim=True), bin_size, "max")[0]
    ).abs().max() <= TOL
    # any head, any window, at full resolution from q, k and the log-sum-exps
    T = q.shape[1]
    assert (weights_window(cap, 4, (0, T), (0, T)) - ref_w[4]).abs().max().item() <= TOL
    assert (weights_window(cap, None, (9, 20), (3, 30)) - ref_w[:, 9:20, 3:30]).abs().max().item() <= TOL


def test_statistics_by_hand_on_a_previous_token_head():
    # q·k is large exactly for the previous position: every row but the first puts ~all weight there
    T, hd = 6, 8
    k = torch.eye(T, hd)[None] * 40  # (1, T, hd): key j points along axis j
    q = torch.roll(torch.eye(T, hd), shifts=1, dims=0)[None] * 40  # query i points along axis i - 1
    q[0, 0] = 0.0
    v = torch.randn(1, T, hd)
    _, cap = capture_attention(q, k, v, KeyRanges.causal(T), scale=hd**-0.5, bin_size=1)
    assert cap.rows["prev_token_weight"][0, 1:].min().item() > 0.999
    assert math.isnan(cap.rows["prev_token_weight"][0, 0].item())  # row 0 has no previous token
    # e^-565 off the previous key underflows: the rows are one-hot but for float32 rounding, of a mean distance
    # (≤ T) summed over T keys, and of an entropy that cancels scores of 40·40/√hd = 565 against the row's lse
    one_hot = derived_bound("float32", T, T)
    assert cap.rows["mean_distance"][0, 1:].tolist() == pytest.approx([1.0] * (T - 1), abs=one_hot)
    assert cap.rows["entropy"][0, 1:].max().item() <= derived_bound("float32", 40 * 40 * hd**-0.5, T)
    assert cap.rows["max_weight"][0, 0].item() == pytest.approx(1.0)  # row 0 sees only itself


def test_fully_masked_rows_give_zeros_not_nan():
    q, k, v = inputs(length=12)
    keys = KeyRanges.causal(12, start=4)  # rows 0..3 of a left-padded decoder see nothing
    out, cap = capture_attention(q, k, v, keys, scale=0.25, bin_size=2)
    assert not torch.isnan(out).any() and out[:, :4].abs().max().item() == 0.0
    assert torch.isneginf(cap.rows["lse"][:, :4]).all()
    assert weights_window(cap, 0, (0, 12), (0, 12))[:4].abs().max().item() == 0.0
    assert not torch.isnan(weights_window(cap, 0, (0, 12), (0, 12))).any()


def test_softcap_is_applied_where_the_model_applies_it():
    q, k, v = inputs(length=10)
    _, cap = capture_attention(q, k, v, KeyRanges.full(10), scale=0.25, bin_size=1, softcap=2.0)
    scores = torch.tanh((q @ k.repeat_interleave(2, 0).transpose(-1, -2)) * 0.25 / 2.0) * 2.0
    assert (weights_window(cap, None, (0, 10), (0, 10)) - scores.softmax(-1)).abs().max().item() <= TOL


def test_windows_are_bounded_and_need_q_and_k():
    q, k, v = inputs(length=8)
    _, cap = capture_attention(q, k, v, KeyRanges.full(8), scale=0.25, bin_size=1, keep_qk=False)
    assert cap.q is None and cap.k is None
    with pytest.raises(ValueError, match="keep_qk=True"):
        weights_window(cap, 0, (0, 8), (0, 8))
    _, cap = capture_attention(q, k, v, KeyRanges.full(8), scale=0.25, bin_size=1)
    with pytest.raises(ValueError, match="over the limit of 16 cells"):
        weights_window(cap, 0, (0, 8), (0, 8), limit=16)


def test_pooled_maps_stay_within_their_budget():
    # a head drawn whole needs pooled maps only for the grid's 64-cell tiles; a long one, 256 cells a side
    assert pool_bin(40, 270) == 1 and pool_bin(384, 270) == 6 and pool_bin(385, 270) == 2 and pool_bin(512, 270) == 2
    assert pool_bin(8192, 270) == 32
    # 12 layers x 64 heads: cells shrink so every head of every layer stays within the budget
    b = pool_bin(8192, 12 * 64)
    assert 12 * 64 * math.ceil(8192 / b) ** 2 <= capture_layer.POOL_CELL_BUDGET


def test_session_captures_each_sequence_of_a_batch_apart():
    q, k, v = inputs(length=9)
    session = CaptureSession(batch=2, q_len=9, n_heads_total=6)
    keys = [KeyRanges.causal(9), KeyRanges.causal(9, start=3)]
    out = session.attend(torch.stack([q, q]), torch.stack([k, k]), torch.stack([v, v]), keys, 0.25)
    assert out.shape == (2, 6, 9, 16)
    assert [len(s) for s in session.layers] == [1, 1]
    assert session.layers[1][0].keys is keys[1]
    assert torch.equal(out[0], capture_attention(q, k, v, keys[0], scale=0.25, bin_size=1)[0])


def test_mean_distance_keeps_its_precision_on_long_inputs():
    """A previous-token head at 2,048 tokens: every row's distance is about 1.

    It matches the eager path's to 1e-5 relative, and float64 truth as closely as the
    eager path itself does; i·Σw - Σ w·j in float32 once lost it to cancellation (2e-4 off).
    """
    length, hd = 2048, 16
    g = torch.Generator().manual_seed(0)
    axes = torch.randn(length, hd, generator=g)
    k = axes[None] * 6  # (1, T, hd)
    q = torch.roll(axes, shifts=1, dims=0)[None] * 6  # query i looks like key i - 1
    v = torch.zeros(1, length, 1)
    _, cap = capture_attention(q, k, v, KeyRanges.causal(length), scale=hd**-0.5, bin_size=8)
    scores = (q[0].double() @ k[0].double().T) * hd**-0.5
    weights = scores.masked_fill(~KeyRanges.causal(length).dense(), -math.inf).softmax(-1)
    positions = torch.arange(length, dtype=torch.float64)
    truth = (weights * (positions[:, None] - positions[None, :]).abs()).sum(-1)  # float64
    ours = cap.rows["mean_distance"][0].double()
    _, eager = scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True, scale=hd**-0.5)
    eager = row_statistics(eager[0], KeyRanges.causal(length).dense())["mean_distance"][0].double()

    def relative(a, b):
        return ((a - b).abs() / b.clamp_min(1))[1:].max().item()

    assert relative(ours, eager) <= TOL
    assert relative(ours, truth) <= relative(eager, truth) * 1.01
    assert cap.rows["prev_token_weight"][0, 100:].mean().item() > 0.5  # it really is a previous-token head


def test_values_may_be_narrower_than_queries_and_keys():
    """DeepSeek-style layers pass v with its own head size."""
    q, k, _ = inputs(length=12)
    v = torch.randn(3, 12, 5)
    out, _ = capture_attention(q, k, v, KeyRanges.causal(12), scale=0.25, bin_size=2)
    ref, _ = scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True, scale=0.25)
    assert out.shape == (6, 12, 5) and (out - ref[0]).abs().max().item() <= TOL


def test_chunks_smaller_than_a_pooled_bin_merge_into_it(monkeypatch):
    monkeypatch.setattr(capture_kernel, "CHUNK_ELEMENTS", 6 * 41 * 2)  # two query rows a chunk, bins of 5
    q, k, v = inputs()
    keys = KeyRanges.causal(41)
    _, ref_w = reference(q, k, v, keys)
    _, cap = capture_attention(q, k, v, keys, scale=16**-0.5, bin_size=5)
    assert (cap.pooled_max.nan_to_num(0) - pool(ref_w, 5, "max")).abs().max().item() <= TOL
    counts = pooled_counts(keys, 5)
    mean = (pool(ref_w, 5, "sum") / counts.clamp_min(1)).masked_fill(counts == 0, 0)
    assert (cap.pooled_mean.nan_to_num(0) - mean).abs().max().item() <= TOL


def test_dead_rows_read_the_same_in_any_chunk(monkeypatch):
    q, k, v = inputs(length=12)
    keys = KeyRanges.causal(12, start=5)
    _, whole = capture_attention(q, k, v, keys, scale=0.25, bin_size=1)
    monkeypatch.setattr(capture_kernel, "CHUNK_ELEMENTS", 6 * 12)  # one row a chunk: rows 0..4 alone
    _, split = capture_attention(q, k, v, keys, scale=0.25, bin_size=1)
    for name in whole.rows:
        torch.testing.assert_close(split.rows[name][:, :5], whole.rows[name][:, :5], rtol=0, atol=0, equal_nan=True)
    assert (
        whole.rows["entropy"][:, :5].abs().max().item() == 0.0
        and torch.isnan(whole.rows["prev_token_weight"][:, 0]).all()
    )


@pytest.mark.parametrize("length", [30, 384, 700])
@pytest.mark.parametrize("keep_qk", [True, False])
def test_a_captures_size_is_known_before_it_runs(length, keep_qk):
    from attnviz.core.capture import predicted_nbytes
    from attnviz.models.embedded.config import EmbeddedConfig
    from attnviz.models.embedded.model import EmbeddedModel

    model = EmbeddedModel(EmbeddedConfig(d_model=32, n_head=4, n_kv_head=2, n_layer=3))
    record = model.run(" ".join(["word"] * length), length, keep_qk=keep_qk)
    captured = sum(layer.nbytes for layer in record.layers)
    assert captured == predicted_nbytes(3, 4, 2, 8, length, keep_qk)


@pytest.mark.parametrize("mask", ["causal", "padded", "window"])
def test_a_capture_of_full_weights_keeps_what_the_chunked_capture_keeps(mask):
    """The eager route: the statistics and maps read from weights equal those computed from q and k."""
    from attnviz.core.capture import capture_weights

    g = torch.Generator().manual_seed(4)
    T = 13
    q, k, v = (torch.randn(4, T, 8, generator=g) for _ in range(3))
    keys = {
        "causal": KeyRanges.causal(T),
        "padded": KeyRanges.causal(T, start=2, end=T),
        "window": KeyRanges.causal(T, window=4),
    }[mask]
    _, ours = capture_attention(q, k, v, keys, scale=8**-0.5, bin_size=3)
    weights = weights_window(ours, None, (0, T), (0, T))  # (n_head, T, T)
    theirs = capture_weights(weights, keys, bin_size=3, scale=8**-0.5)
    for name in ("entropy", "max_weight", "first_token_weight", "prev_token_weight", "self_weight", "mean_distance"):
        a, b = ours.rows[name], theirs.rows[name]
        # statistics of weights from two routes (tests/tolerances.py); a mean distance weighs each weight's error by
        # its distance, < T
        tol = bound("row_statistics") * (T if name == "mean_distance" else 1)
        assert torch.equal(a.isnan(), b.isnan()) and torch.allclose(a.nan_to_num(), b.nan_to_num(), atol=tol, rtol=0)
    tol = bound("attention")  # a bin's max or mean of weights from two routes
    assert torch.allclose(ours.pooled_max.nan_to_num(), theirs.pooled_max.nan_to_num(), atol=tol, rtol=0)
    assert torch.allclose(ours.pooled_mean.nan_to_num(), theirs.pooled_mean.nan_to_num(), atol=tol, rtol=0)
    assert torch.equal(weights_window(theirs, 2, (3, 9), (0, 5)), weights[2, 3:9, 0:5])
    assert theirs.q is None and bool(theirs.rows["lse"][:, keys.visible() > 0].isnan().all())


def test_a_capture_of_full_weights_refuses_weight_its_mask_hides():
    from attnviz.core.capture import capture_weights

    weights = torch.full((1, 3, 3), 1 / 3)  # every row sees every key
    with pytest.raises(ValueError, match="hides"):
        capture_weights(weights, KeyRanges.causal(3), bin_size=1, scale=1.0)


def test_learned_sinks_by_hand():
    """One head, two keys with scores 0 and ln 2, a sink logit of 0: exp gives 1, 2 and 1, so the keys get
    1/4 and 1/2 and the sink 1/4; the row sums to 3/4."""
    q = torch.tensor([[[1.0]]])  # (1 head, 1 query, hd 1)
    k = torch.tensor([[[0.0], [math.log(2)]]])  # (1, 2 keys, 1)
    v = torch.tensor([[[4.0], [8.0]]])
    out, capture = capture_attention(q, k, v, KeyRanges.full(1, 2), scale=1.0, bin_size=1, sinks=torch.tensor([0.0]))
    weights = weights_window(capture, 0, (0, 1), (0, 2))
    assert torch.allclose(weights, torch.tensor([[0.25, 0.5]]))
    assert torch.allclose(capture.rows["sink_weight"], torch.tensor([[0.25]]))
    assert torch.allclose(out, torch.tensor([[[0.25 * 4 + 0.5 * 8]]]))  # the sink carries no value
    entropy = -(0.25 * math.log(0.25) + 0.5 * math.log(0.5))  # over the keys only
    # float32 against float64 by hand: three exps (keys and sink) summed, terms w·log w with |log w| ≤ ln 4
    assert math.isclose(float(capture.rows["entropy"][0, 0]), entropy, abs_tol=derived_bound("float32", math.log(4), 3))
    assert math.isclose(float(capture.rows["max_weight"][0, 0]), 0.5, abs_tol=derived_bound("float32", 1.0, 3))
    _, same = scaled_dot_product_attention(q[None], k[None], v[None], scale=1.0, sinks=torch.tensor([0.0]))
    assert torch.allclose(same[0, 0], weights)


def test_a_row_that_sees_no_key_gives_everything_to_its_sink():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    keys = KeyRanges(torch.tensor([0, 0, 0]), torch.tensor([0, 2, 3]), 3)  # row 0 sees nothing
    out, capture = capture_attention(q, k, v, keys, scale=0.5, bin_size=1, sinks=torch.tensor([1.0, -1.0]))
    assert torch.equal(out[:, 0], torch.zeros(2, 4)) and torch.equal(capture.rows["sink_weight"][:, 0], torch.ones(2))
    window = weights_window(capture, None, (0, 3), (0, 3))
    assert torch.allclose(window.sum(dim=-1)[:, 1:] + capture.rows["sink_weight"][:, 1:], torch.ones(2, 2))


@pytest.mark.parametrize("rows_first", [True, False], ids=["rows first", "keys first"])
@pytest.mark.parametrize("chunk_rows", [3, 44], ids=["chunks inside bins", "one chunk"])
@pytest.mark.parametrize("mask", ["causal", "window 5", "left-padded causal", "right-padded encoder"])
def test_pooled_maps_and_distances_are_the_same_whichever_way_a_chunk_is_pooled(
    monkeypatch, rows_first, chunk_rows, mask
):
    """Narrow bins pool rows first, wide ones keys first; chunks of 3 rows straddle bins of 4."""
    monkeypatch.setattr(capture_kernel, "ROWS_FIRST_BIN", 100 if rows_first else 0)
    monkeypatch.setattr(capture_kernel, "CHUNK_ELEMENTS", 6 * 41 * chunk_rows)
    expected = 3 if chunk_rows == 3 else 44  # 44 rows: the whole text in one chunk
    assert capture_kernel._chunk_rows(MASKS["full"](41), 6, 4, torch.device("cpu")) == expected
    q, k, v = inputs()
    keys = MASKS[mask](41)
    ref_out, ref_w = reference(q, k, v, keys)
    out, cap = capture_attention(q, k, v, keys, scale=16**-0.5, bin_size=4)
    assert (out - ref_out).abs().max().item() <= TOL
    visible = keys.dense()
    assert (cap.pooled_max.nan_to_num(0) - pool(ref_w, 4, "max")).abs().max().item() <= TOL
    counts = pooled_counts(keys, 4)
    mean = (pool(ref_w, 4, "sum") / counts.clamp_min(1)).masked_fill(counts == 0, 0)
    assert (cap.pooled_mean.nan_to_num(0) - mean).abs().max().item() <= TOL
    head_mean = pool(ref_w.mean(dim=0, keepdim=True), 4, "max")[0]
    assert (cap.mean_pooled_max.nan_to_num(0) - head_mean).abs().max().item() <= TOL
    distance = (torch.arange(41.0)[:, None] - torch.arange(41.0)[None, :]).abs()
    truth = (ref_w * distance * visible).sum(-1)  # up to 40 tokens: float32 rounding relative to the distance
    torch.testing.assert_close(cap.rows["mean_distance"], truth, rtol=TOL, atol=TOL, equal_nan=True)


def test_a_cpu_chunk_holds_at_most_its_rows_and_cells():
    keys = KeyRanges.causal(8192)
    cpu = torch.device("cpu")
    assert capture_kernel._chunk_rows(keys, 9, 32, cpu) == 96  # 2**23 cells / (9 heads x 8,192 keys), whole bins
    assert capture_kernel._chunk_rows(KeyRanges.causal(512), 9, 8, cpu) == capture_kernel.CPU_CHUNK_ROWS  # 128
    assert capture_kernel._chunk_rows(keys, 64, 32, cpu) == 16  # 64 heads: half a bin a chunk, merged into it


def test_a_capture_of_tensors_that_require_grad_runs_and_carries_none():
    q, k, v = (t.requires_grad_() for t in inputs(length=10))
    out, cap = capture_attention(q, k, v, KeyRanges.causal(10), scale=0.25, bin_size=2)
    assert not out.requires_grad and not cap.q.requires_grad
    ref, _ = reference(q.detach(), k.detach(), v.detach(), KeyRanges.causal(10))
    assert (out - ref).abs().max().item() <= TOL

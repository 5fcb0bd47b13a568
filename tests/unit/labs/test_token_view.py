"""One token's attention against the full weights of the embedded model, and the figures that draw it."""

import math

import pytest
import torch

from attnviz.labs import token_view
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from tests.tolerances import bound, derived_bound

TEXT = "the cat sat on the mat because it was tired"

ATOL = bound("attention")


@pytest.fixture(scope="module", params=[False, True], ids=["encoder", "causal"])
def captured(request):
    model = EmbeddedModel(EmbeddedConfig(d_model=32, n_head=4, n_kv_head=2, n_layer=3, causal=request.param))
    return model.run(TEXT, 64), model.reference_weights(TEXT, 64), request.param  # full: (n_layer, n_head, T, T)


def test_row_and_column_are_the_full_weights_with_the_future_nan(captured):
    record, full, causal = captured
    T = record.q_len
    future = (
        torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1) if causal else torch.zeros(T, T, dtype=torch.bool)
    )
    for layer in range(record.n_layer):
        for token in (0, 3, T - 1):
            row = token_view.token_row(record, layer, token)  # (n_head, T)
            col = token_view.token_column(record, layer, token)  # (n_head, T)
            assert row.shape == col.shape == (record.n_head, T)
            assert torch.equal(row.isnan(), future[token].expand_as(row))
            assert torch.equal(col.isnan(), future[:, token].expand_as(col))
            seen = ~future[token]
            assert torch.allclose(row[:, seen], full[layer, :, token, seen], atol=ATOL)
            seen = ~future[:, token]
            assert torch.allclose(col[:, seen], full[layer, :, seen, token], atol=ATOL)
            assert torch.allclose(row.nansum(-1), torch.ones(record.n_head), atol=ATOL)


def test_a_column_in_small_chunks_is_the_same_column(captured):
    record = captured[0]
    whole = token_view.token_column(record, 1, 2)
    chunked = token_view.token_column(record, 1, 2, chunk=3)
    assert torch.equal(whole.isnan(), chunked.isnan())
    assert torch.allclose(whole.nan_to_num(), chunked.nan_to_num())


def test_across_layers_stacks_every_layer(captured):
    record, full, _ = captured
    for direction, index in (("attends_to", lambda t: full[:, :, t, :]), ("attended_by", lambda t: full[:, :, :, t])):
        stacked = token_view.across_layers(record, 4, direction)
        assert stacked.shape == (record.n_layer, record.n_head, record.q_len)
        assert torch.allclose(stacked.nan_to_num(), index(4), atol=ATOL)


def test_selected_tokens_sum_and_mean_with_masked_cells_as_zero(captured):
    record, full, causal = captured
    chosen = [1, 5]
    rows = full[2][:, chosen, :]  # (n_head, 2, T), 0 where masked
    mean = token_view.selected_tokens(record, 2, chosen, "mean")
    total = token_view.selected_tokens(record, 2, chosen, "sum")
    seen = torch.arange(record.q_len) <= 5 if causal else torch.ones(record.q_len, dtype=torch.bool)
    assert torch.equal(mean.isnan().any(0), ~seen)
    assert torch.allclose(mean[:, seen], rows.mean(1)[:, seen], atol=ATOL)
    assert torch.allclose(total[:, seen], rows.sum(1)[:, seen], atol=ATOL)
    assert torch.allclose(mean.nansum(-1), torch.ones(record.n_head), atol=ATOL)  # still a distribution
    with pytest.raises(ValueError, match="reduce"):
        token_view.selected_tokens(record, 2, chosen, "max")
    with pytest.raises(ValueError, match="at least one"):
        token_view.selected_tokens(record, 2, [], "mean")


def test_layer_weights_for_the_line_view(captured):
    record, full, causal = captured
    w = token_view.layer_weights(record, 1)
    assert torch.allclose(w.nan_to_num(), full[1], atol=ATOL)
    assert bool(w.isnan().any()) == causal


def test_bad_token_layer_or_direction_say_what_is_allowed(captured):
    record = captured[0]
    with pytest.raises(ValueError, match=f"has {record.q_len} tokens"):
        token_view.token_row(record, 0, record.q_len)
    with pytest.raises(ValueError, match="3 layers"):
        token_view.token_column(record, 3, 0)
    with pytest.raises(ValueError, match="direction"):
        token_view.across_layers(record, 0, "sideways")


def test_a_long_input_is_read_in_bounded_windows():
    model = EmbeddedModel(EmbeddedConfig(d_model=32, n_head=2, n_layer=1, causal=True))
    record = model.run(" ".join(["word"] * 600), 600)
    col = token_view.token_column(record, 0, 10, chunk=128)
    assert col.shape == (2, 600) and col[:, :10].isnan().all() and not col[:, 10:].isnan().any()
    assert token_view.token_row(record, 0, 599).shape == (2, 600)
    with pytest.raises(ValueError, match="64 tokens"):
        token_view.layer_weights(record, 0)


def test_pages_are_fixed_blocks_and_the_last_is_shorter():
    assert token_view.n_pages(300, 128) == 3 and token_view.n_pages(256, 128) == 2 and token_view.n_pages(5, 128) == 1
    assert [token_view.page_bounds(300, p, 128) for p in range(3)] == [(0, 128), (128, 256), (256, 300)]
    assert [token_view.page_of(t, 128) for t in (0, 127, 128, 255, 256, 299)] == [0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="pages 0 to 2"):
        token_view.page_bounds(300, 3, 128)
    with pytest.raises(ValueError, match="at least 1"):
        token_view.n_pages(0, 128)


def test_weight_off_the_page_is_what_the_page_leaves_of_the_row():
    # powers of two add up exactly, so the parts are compared with ==
    row = torch.tensor([[0.5, 0.25, 0.125, 0.0625, 0.0625, math.nan], [0.0, 0.0, 1.0, 0.0, 0.0, 0.0]])
    share = token_view.window_share(row, 1, 3)
    assert share.before.tolist() == [0.5, 0.0] and share.inside.tolist() == [0.375, 1.0]
    assert share.after.tolist() == [0.125, 0.0]
    assert torch.equal(share.before + share.after, 1 - share.inside)
    assert share.total.tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="does not fit"):
        token_view.window_share(row, 4, 7)


def test_a_real_rows_parts_add_up_to_one():
    model = EmbeddedModel(EmbeddedConfig(d_model=48, n_head=3, n_layer=1, causal=True))
    record = model.run(" ".join(f"w{i % 13}" for i in range(600)), 600)
    row = token_view.token_row(record, 0, 400)  # (n_head, 600), NaN after 400
    start, stop = token_view.page_bounds(600, token_view.page_of(400, 128), 128)
    assert (start, stop) == (384, 512)
    share = token_view.window_share(row, start, stop)
    assert torch.equal(share.after, torch.zeros(3, dtype=torch.float64))  # the future is masked: no weight
    # the row is a float32 softmax of 401 keys: it sums to 1 up to its weights' and its normaliser's rounding
    assert torch.allclose(share.before + share.after, 1 - share.inside, atol=derived_bound("float32", 1.0, 401), rtol=0)
    # two float64 sums of the same 17 weights, of a slice and of a copy: their order may differ
    assert torch.allclose(
        share.inside, row[:, 384:401].double().sum(-1), atol=derived_bound("float64", 1.0, 17), rtol=0
    )


def test_the_pooled_overview_sums_bins_to_the_row_total():
    row = torch.tensor([[0.5, 0.25, 0.125, 0.0625, 0.0625, math.nan, math.nan], [1.0, *[0.0] * 6]])
    pooled = token_view.pooled_overview(row, n_bins=3)  # 7 tokens in bins of 3: 0-2, 3-5, 6
    assert pooled.edges == (0, 3, 6, 7) and pooled.bin_size == 3
    assert pooled.sums[0, :2].tolist() == [0.875, 0.125] and math.isnan(pooled.sums[0, 2])  # bin 6: all masked
    assert pooled.sums[1].tolist() == [1.0, 0.0, 0.0]
    assert torch.equal(pooled.sums.nansum(-1), torch.tensor([1.0, 1.0], dtype=torch.float64))
    long = torch.rand(4, 8192)
    pooled = token_view.pooled_overview(long)
    assert pooled.sums.shape == (4, 128) and pooled.bin_size == 64
    # float64 sums of 8,192 values in bins then across them, against one sum: the order differs
    tol = derived_bound("float64", float(long.sum(-1).max()), 8192)
    assert torch.allclose(pooled.sums.sum(-1), long.double().sum(-1), atol=tol, rtol=0)


def test_a_head_row_or_the_mean_over_heads():
    w = torch.tensor([[0.2, 0.8, math.nan], [0.6, 0.4, math.nan]])
    assert token_view.head_row(w, 1)[:2].tolist() == pytest.approx([0.6, 0.4]) and token_view.head_row(w, 1)[2].isnan()
    assert torch.allclose(token_view.head_row(w, "mean")[:2], torch.tensor([0.4, 0.6]))
    both = token_view.heads_and_mean(w)
    assert both.shape == (3, 3) and both[2, :2].tolist() == pytest.approx([0.4, 0.6]) and both[:, 2].isnan().all()
    with pytest.raises(ValueError, match="2 heads"):
        token_view.head_row(w, 2)

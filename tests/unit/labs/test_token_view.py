"""One token's attention against the full weights of the embedded model, and the figures that draw it."""

import pytest
import torch

from attnviz.labs import token_view
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel

TEXT = "the cat sat on the mat because it was tired"

ATOL = 1e-5


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

"""One token's attention against the full weights of the embedded model, and the figures that draw it."""

import math

import numpy as np
import pytest
import torch

from attnviz import token_view
from attnviz.embedded import EmbeddedConfig, EmbeddedModel
from attnviz.token_view_figures import (
    CELL_CHARS,
    MASKED_LEVEL,
    clicked_token,
    make_coloured_text_figure,
    make_line_view_figure,
)
from tests.plotly_json import decode, spec_of

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


# figures


def test_coloured_text_is_uint8_with_masked_grey_and_exact_hover():
    weights = torch.tensor([[0.5, 0.5, math.nan], [1.0, 0.0, math.nan]])
    labels = ["a", "<b>", "a" * 40]
    spec = spec_of(make_coloured_text_figure(weights, labels, focus=1))
    assert len(spec["data"]) == 2  # the coloured cells, and invisible points over them that take the clicks
    points = spec["data"][1]
    assert points["type"] == "scatter" and points["marker"]["opacity"] == 0 and points["hoverinfo"] == "none"
    heat = spec["data"][0]
    assert heat["z"]["dtype"] == "u1"
    z = decode(heat["z"])
    assert z.tolist() == [[127, 127, MASKED_LEVEL], [254, 0, MASKED_LEVEL]]
    exact = decode(heat["customdata"])
    assert exact.dtype == np.float32 and exact[0, 0] == 0.5 and np.isnan(exact[0, 2])
    assert heat["y"] == ["H0", "H1"]
    # cells cut with an ellipsis, markup escaped; the full text (escaped) is the x category read on hover
    assert heat["text"][0] == ["a", "&lt;b&gt;", "a" * (CELL_CHARS - 1) + "…"]
    assert heat["x"] == ["0 a", "1 &lt;b&gt;", "2 " + "a" * 40]
    assert "%{x}" in heat["hovertemplate"]
    assert spec["layout"]["shapes"][0]["x0"] == 0.5


def test_coloured_text_rows_can_be_layers_and_long_inputs_drop_cell_text():
    weights = torch.rand(4, 300)
    spec = spec_of(make_coloured_text_figure(weights, [f"t{i}" for i in range(300)], row_names=list("ABCD")))
    heat = spec["data"][0]
    assert heat["y"] == list("ABCD") and "text" not in heat
    assert len(spec_of(make_coloured_text_figure(weights, ["x"] * 300)).__str__()) < 100_000
    with pytest.raises(ValueError, match="labels"):
        make_coloured_text_figure(weights, ["x"] * 3)


def test_line_view_one_legend_entry_per_head_and_only_weights_over_the_threshold():
    T, n_head = 5, 3
    w = torch.full((n_head, T, T), 0.001)
    w[0, 0, 1] = 0.9  # one strong line in head 0
    w[1, 2, 3] = 0.05  # one weak one in head 1
    w[2, 4, 4] = math.nan  # head 2: nothing over the threshold
    spec = spec_of(make_line_view_figure(w, list("abcde"), heads_on=[0, 2]))
    lines = [t for t in spec["data"] if t.get("legendgroup")]
    legend = [t["name"] for t in lines if t.get("showlegend", True)]
    assert legend == ["H0", "H1", "H2"]
    visible = {t["name"]: t.get("visible", True) for t in lines}
    assert visible == {"H0": True, "H1": "legendonly", "H2": True}
    strong = next(t for t in lines if t["name"] == "H0")
    assert decode(strong["y"])[:2].tolist() == [0.0, -1.0]  # query 0 (left) to key 1 (right)
    weak = next(t for t in lines if t["name"] == "H1")
    assert weak["opacity"] < strong["opacity"] and weak["line"]["width"] < strong["line"]["width"]
    texts = [t for t in spec["data"] if not t.get("legendgroup")]
    assert len(texts) == 2  # the two columns of tokens


def test_line_view_focus_keeps_one_tokens_lines():
    w = torch.full((2, 4, 4), 0.25)
    spec = spec_of(make_line_view_figure(w, list("abcd"), focus=2, direction="attended_by"))
    for trace in (t for t in spec["data"] if t.get("legendgroup")):
        y = decode(trace["y"]).reshape(-1, 3)
        assert (y[:, 1] == -2).all() and len(y) == 4  # every query, into key 2 only


def test_a_click_on_the_text_names_its_token():
    spec = spec_of(make_coloured_text_figure(torch.rand(2, 3), ["a", "b b", "c"]))
    x = spec["data"][0]["x"][1]
    assert clicked_token({"selection": {"points": [{"x": x, "y": "H0", "z": 3}]}}) == 1
    assert clicked_token({"selection": {"points": []}}) is None
    assert clicked_token(None) is None

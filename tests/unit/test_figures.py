"""Figure builders: the values that reach the browser, their types and the payload size."""

import json
import math

import numpy as np
import pytest
import torch
from plotly.colors import sample_colorscale

from attnviz.figures import (
    make_head_grid_figure,
    make_head_heatmap_figure,
    make_head_stats_figure,
    make_parity_figure,
    make_pooled_head_figure,
    make_row_figure,
    quantize_weights,
    thumbnail,
    weight_colorscale,
)
from attnviz.head_stats import head_statistics
from attnviz.masks import causal_mask
from attnviz.parity import PARITY_TOLERANCE
from attnviz.token_display import hover_text
from tests.plotly_json import decode, spec_of


def random_attention(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).softmax(-1)


def test_large_heatmap_sends_exact_float32_weights_with_hover():
    w = random_attention(5, 5)
    labels = ["0 the", "1 cat", "2 the", "3 dog", "4 ."]
    spec = spec_of(make_head_heatmap_figure(w, labels, labels, title="L0 H1"))
    trace = spec["data"][0]
    z = decode(trace["z"])
    assert trace["z"]["dtype"] == "f4"
    assert np.array_equal(z, w.numpy().astype(np.float32))
    assert trace["x"] == labels and trace["y"] == labels  # repeated "the" stays two rows
    assert "weight %{z" in trace["hovertemplate"]
    assert (trace["zmin"], trace["zmax"]) == (0.0, 1.0)


def test_masked_cells_are_gaps_on_a_grey_background():
    w = random_attention(4, 4).tril()
    spec = spec_of(make_head_heatmap_figure(w, list("abcd"), list("efgh"), mask=causal_mask(4)))
    z = decode(spec["data"][0]["z"])
    assert np.isnan(z[0, 1:]).all() and not np.isnan(z[np.tril_indices(4)]).any()
    assert spec["layout"]["plot_bgcolor"] == "#d4d4d4"


def test_label_mismatch_is_an_error():
    with pytest.raises(ValueError, match="do not match"):
        make_head_heatmap_figure(torch.zeros(2, 3), ["a", "b"], ["a", "b"])


def test_colorscale_maps_weight_to_base_colour_at_gamma():
    stops = weight_colorscale(0.5)
    assert stops[0][0] == 0.0 and stops[-1][0] == 1.0
    mid = stops[len(stops) // 2]
    assert mid[0] == pytest.approx(0.25)  # w = 0.25 gets the colour of sqrt(w) = 0.5
    assert mid[1] == sample_colorscale("Viridis", [0.5])[0]
    assert quantize_weights(torch.tensor([0.0, 0.25, 1.0]), gamma=0.5).tolist() == [0, 128, 255]


def test_thumbnail_max_pools_so_diagonals_survive():
    eye = torch.eye(64)
    small = thumbnail(eye, 16)
    assert small.shape == (16, 16) and torch.equal(small.diagonal(), torch.ones(16))
    assert thumbnail(eye[:8, :8], 16) is not None and thumbnail(eye[:8, :8], 16).shape == (8, 8)


def test_grid_is_one_uint8_mosaic_with_a_mean_column():
    att = random_attention(2, 3, 6, 6)  # (n_layer, n_head, q, k)
    spec = spec_of(make_head_grid_figure(att, tile=6))
    trace = spec["data"][0]
    z = decode(trace["z"])
    assert trace["z"]["dtype"] == "u1"
    assert z.shape == (2 * 6, 4 * 6)
    # layer 1, head 2 tile sits at rows 6..11, columns 12..17
    assert np.array_equal(z[6:12, 12:18], quantize_weights(att[1, 2]))
    assert np.array_equal(z[0:6, 18:24], quantize_weights(att[0].mean(0)))
    assert spec["layout"]["xaxis"]["ticktext"] == ["H0", "H1", "H2", "mean"]
    assert spec["layout"]["yaxis"]["ticktext"] == ["L0", "L1"]


def test_payload_for_12_heads_of_512_tokens_stays_under_2mb():
    att = random_attention(1, 12, 512, 512)
    labels = [f"{i} tok{i}" for i in range(512)]
    grid = make_head_grid_figure(att).to_json()
    large = make_head_heatmap_figure(att[0, 3], labels, labels).to_json()
    total = len(grid) + len(large)
    assert total < 2_000_000, total
    naive = len(json.dumps(att[0].double().tolist()))  # every head as float64 JSON, what we replace
    assert naive > 10 * total


def test_stats_figure_has_one_cell_per_head():
    att = random_attention(2, 3, 4, 4)
    stats = head_statistics(att)
    spec = spec_of(make_head_stats_figure(stats, "entropy"))
    z = decode(spec["data"][0]["z"])
    assert z.shape == (2, 3)
    assert z[1, 2] == pytest.approx(stats.query("layer == 1 and head == 2")["entropy"].item(), abs=1e-6)
    with pytest.raises(ValueError, match="unknown statistic"):
        make_head_stats_figure(stats, "nope")


def test_parity_colours_put_the_tolerance_where_the_tolerance_is():
    """The pale stop marks 1e-5 on the log scale whatever the worst difference; it once assumed a top of 1e-3."""
    diffs = torch.tensor([[1e-7, 1e-1], [0.0, 2e-6]])  # one head off by 0.1: the scale tops out at log10(0.1)
    trace = spec_of(make_parity_figure(diffs))["data"][0]
    zmin, zmax = trace["zmin"], trace["zmax"]
    assert (zmin, zmax) == (-12, pytest.approx(-1.0))
    stops = dict((round(level, 6), color) for level, color in trace["colorscale"])
    at_tolerance = (math.log10(PARITY_TOLERANCE) - zmin) / (zmax - zmin)
    assert stops[round(at_tolerance, 6)] == "#d9ef8b"
    # nothing over the tolerance: the scale tops at 1e-3 and the stop still sits at 1e-5
    trace = spec_of(make_parity_figure(torch.tensor([[1e-7]])))["data"][0]
    assert [level for level, _ in trace["colorscale"]][1] == pytest.approx((-5 + 12) / (-3 + 12))


def test_pooled_view_is_drawn_on_token_positions_with_masked_bins_grey():
    pooled = torch.tensor([[0.5, float("nan")], [0.25, 1.0]])  # 2 x 2 bins of 4 tokens, 7 tokens in all
    spec = spec_of(make_pooled_head_figure(pooled, 4, 7, 7, kind="max"))
    trace = spec["data"][0]
    z = decode(trace["z"])
    assert z.dtype == np.float32 and np.isnan(z[0, 1]) and z[1, 1] == 1.0
    assert decode(trace["x"]).tolist() == [1.5, 5.0] and decode(trace["y"]).tolist() == [1.5, 5.0]  # bin centres
    assert spec["layout"]["plot_bgcolor"] == "#d4d4d4" and spec["layout"]["dragmode"] == "select"
    assert "over 4×4 tokens" in trace["hovertemplate"]


def test_row_view_leaves_masked_keys_out():
    spec = spec_of(
        make_row_figure(torch.tensor([0.2, 0.8, 0.0]), ["0 a", "1 b", "2 c"], visible=torch.tensor([True, True, False]))
    )
    y = decode(spec["data"][0]["y"])
    assert y[:2].tolist() == pytest.approx([0.2, 0.8]) and np.isnan(y[2])
    assert spec["data"][0]["text"] == ["0 a", "1 b", "2 c"]


def test_cost_figure_has_a_line_per_path_the_prediction_and_the_limit():
    from attnviz.figures import make_cost_figure

    rows = [{"path": p, "tokens": n, "peak_mb": n / 100} for p in ("naive", "fused") for n in (256, 512)]
    titles = {"naive": "naive", "fused": "fused", "chunked": "chunked"}
    spec = spec_of(make_cost_figure(rows, "peak_mb", titles, predicted=[(512, 5.0), (4096, 300.0)], limit=4096))
    names = [trace["name"] for trace in spec["data"]]
    assert names == ["naive", "fused", "naive, predicted (2 · n_head · n² floats)"]  # no chunked rows: no line
    assert decode(spec["data"][1]["y"]).tolist() == pytest.approx([2.56, 5.12])
    assert spec["layout"]["shapes"][0]["x0"] == 4096 and "4,096" in spec["layout"]["annotations"][0]["text"]
    assert spec["layout"]["xaxis"]["type"] == spec["layout"]["yaxis"]["type"] == "log"


def test_tiling_figure_draws_every_block_and_the_exact_weights():
    from attnviz.cost import tiling_example
    from attnviz.figures import make_tiling_figure

    example = tiling_example(10, 4)
    spec = spec_of(make_tiling_figure(example.steps, example.weights))
    assert len(spec["data"]) == 2 * 3 + 1  # scores and weights per block (4 + 4 + 2 keys), then the exact line
    tiled = np.concatenate([decode(spec["data"][i]["y"]) for i in (1, 3, 5)])
    assert np.allclose(tiled, example.weights.numpy(), atol=1e-6)


def test_user_text_on_hover_is_escaped_wrapped_and_bounded():
    assert hover_text("<b>%{z}</b> & co") == "&lt;b&gt;&#37;{z}&lt;/b&gt; &amp; co"  # no markup, no variable
    assert hover_text("abcdefg", width=3, lines=5) == "abc<br>def<br>g"
    assert hover_text("abcdefg", width=2, lines=2) == "ab<br>cd<br>… 3 more characters"
    assert hover_text("") == ""


def test_cut_labels_get_their_row_and_column_again_with_the_whole_text_on_hover():
    w = torch.softmax(torch.randn(3, 3), -1)
    cut, whole = ["0 a", "1 bb…", "2 c"], ["0 a", "1 bbbbbbbb", "2 c"]
    spec = spec_of(make_head_heatmap_figure(w, cut, cut, q_hover=whole, k_hover=whole))
    _, row, column = spec["data"]
    assert row["y"] == ["1 bb…", "2 c"] and column["x"] == ["1 bb…", "2 c"]
    assert decode(row["z"])[0].tolist() == pytest.approx(w[1].tolist()) and np.isnan(decode(row["z"])[1]).all()
    assert decode(column["z"])[:, 0].tolist() == pytest.approx(w[:, 1].tolist())
    assert "query 1 bbbbbbbb<br>" in row["hovertemplate"] and "key 1 bbbbbbbb<br>" in column["hovertemplate"]
    assert len(spec_of(make_head_heatmap_figure(w, whole, whole, q_hover=whole, k_hover=whole))["data"]) == 1

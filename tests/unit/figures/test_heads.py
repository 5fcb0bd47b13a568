"""Figure builders: the values that reach the browser, their types and the payload size."""

import json
import math

import numpy as np
import pytest
import torch
from plotly.colors import sample_colorscale

from attnviz.core.head_stats import head_statistics
from attnviz.figures.base import make_head_heatmap_figure, weight_colorscale
from attnviz.figures.heads import (
    make_head_grid_figure,
    make_head_stats_figure,
    make_pooled_head_figure,
    make_row_figure,
    quantize_weights,
    thumbnail,
)
from tests.plotly_json import decode, spec_of
from tests.tolerances import derived_bound
from tests.unit.figures.attention_maps import random_attention


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
    naive = 12 * len(json.dumps(att[0, 0].double().tolist()))  # every head as float64 JSON, what we replace
    assert naive > 10 * total


def test_stats_figure_has_one_cell_per_head():
    att = random_attention(2, 3, 4, 4)
    stats = head_statistics(att)
    spec = spec_of(make_head_stats_figure(stats, "entropy"))
    z = decode(spec["data"][0]["z"])
    assert z.shape == (2, 3)
    # the grid is float32: the table's entropy (≤ ln 4 over 4 keys) rounded once
    entropy = stats.query("layer == 1 and head == 2")["entropy"].item()
    assert z[1, 2] == pytest.approx(entropy, abs=derived_bound("float32", math.log(4), 1))
    with pytest.raises(ValueError, match="unknown statistic"):
        make_head_stats_figure(stats, "nope")


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


def test_a_pooled_map_is_a_square_plot_with_its_colour_bar_no_taller():
    from attnviz.figures.base import COLORBAR_PX, MODEBAR_PX

    pooled = torch.rand(63, 63)  # 2,000 tokens in bins of 32
    layout = spec_of(make_pooled_head_figure(pooled, 32, 2000, 2000, max_side=480))["layout"]
    m = layout["margin"]
    assert (layout["width"] - m["l"] - m["r"], layout["height"] - m["t"] - m["b"]) == (480, 480)
    assert m["r"] == COLORBAR_PX and m["t"] >= MODEBAR_PX
    assert "scaleanchor" not in layout["yaxis"]  # a squeezed column narrows the plot, never leaves the bar taller
    spec = spec_of(make_pooled_head_figure(pooled, 32, 2000, 2000))
    assert spec["data"][0]["colorbar"]["len"] == 1.0 and spec["layout"]["width"] - m["l"] - m["r"] == 640


def test_the_grid_leaves_the_toolbar_a_row_above_its_head_labels():
    from attnviz.figures.base import MODEBAR_PX

    layout = spec_of(make_head_grid_figure(torch.rand(2, 3, 8, 8)))["layout"]
    assert layout["margin"]["t"] == 30 + MODEBAR_PX and layout["xaxis"]["side"] == "top"


def test_the_statistics_are_named_and_flagged_in_the_readers_language():
    import pandas as pd

    from attnviz.figures.heads import flag_names, stat_name, stats_in_words
    from attnviz.i18n.translate import set_language

    stats = pd.DataFrame({"layer": [0], "head": [1], "entropy_norm": [0.95], "flags": ["uniform, sink"]})
    assert stat_name("entropy_norm") == "entropy_norm" and flag_names("uniform, sink") == "uniform, sink"
    set_language("zh")
    try:
        shown = stats_in_words(stats)
        assert list(shown.columns) == ["层", "头", "归一化熵", "标记"] and shown["标记"][0] == "均匀, 汇点"
        assert shown["归一化熵"][0] == 0.95 and list(stats.columns)[2] == "entropy_norm"  # numbers and input kept
        assert stat_name("unknown_column") == "unknown_column"
        spec = spec_of(make_head_stats_figure(stats, "entropy_norm"))
        assert spec["data"][0]["colorbar"]["title"]["text"] == "归一化熵"
    finally:
        set_language("en")

"""One token's attention against the full weights of the embedded model, and the figures that draw it."""

import math

import numpy as np
import pytest
import torch

from attnviz.figures.token_view import (
    CELL_CHARS,
    LEGEND_SWATCH,
    MASKED_LEVEL,
    clicked_token,
    head_colors,
    make_coloured_text_figure,
    make_line_view_figure,
    make_pooled_overview_figure,
    make_running_text_figure,
    make_window_share_figure,
    running_lines,
)
from attnviz.labs.token_view import pooled_overview, window_share
from tests.plotly_json import decode, spec_of


def test_coloured_text_is_uint8_with_masked_grey_and_exact_hover():
    weights = torch.tensor([[0.5, 0.5, math.nan], [1.0, 0.0, math.nan]])
    labels = ["a", "<b>", "a" * 40]
    spec = spec_of(make_coloured_text_figure(weights, labels, focus=1))
    assert len(spec["data"]) == 2  # the coloured cells, and invisible points over them that take hover and clicks
    points = spec["data"][1]
    assert points["type"] == "scatter" and points["marker"]["opacity"] == 0 and "hoverinfo" not in points
    assert "%{customdata[1]:.5f}" in points["hovertemplate"]  # the point, not the heatmap, shows the number
    assert decode(points["customdata"]).tolist()[:2] == [[0.0, 0.5], [1.0, 0.5]]  # (token, weight), row by row
    heat = spec["data"][0]
    assert heat["hoverinfo"] == "skip"
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
    strong = next(t for t in lines if t["name"] == "H0" and t["mode"] == "lines")
    assert decode(strong["y"])[:2].tolist() == [0.0, -1.0]  # query 0 (left) to key 1 (right)
    weak = next(t for t in lines if t["name"] == "H1" and t["mode"] == "lines")
    assert weak["opacity"] < strong["opacity"] and weak["line"]["width"] < strong["line"]["width"]
    texts = [t for t in spec["data"] if not t.get("legendgroup")]
    assert len(texts) == 2  # the two columns of tokens


def test_line_view_focus_keeps_one_tokens_lines():
    w = torch.full((2, 4, 4), 0.25)
    spec = spec_of(make_line_view_figure(w, list("abcd"), focus=2, direction="attended_by"))
    for trace in (t for t in spec["data"] if t.get("legendgroup") and t["mode"] == "lines"):
        y = decode(trace["y"]).reshape(-1, 3)
        assert (y[:, 1] == -2).all() and len(y) == 4  # every query, into key 2 only


def test_a_click_on_the_text_names_its_token():
    spec = spec_of(make_coloured_text_figure(torch.rand(2, 3), ["a", "b b", "c"]))
    x = spec["data"][0]["x"][1]
    assert clicked_token({"selection": {"points": [{"x": x, "y": "H0", "z": 3}]}}) == 1
    assert clicked_token({"selection": {"points": []}}) is None
    assert clicked_token(None) is None


def test_coloured_text_has_a_colour_bar_in_weights_up_to_the_largest_shown():
    weights = torch.tensor([[0.02, 0.01, math.nan], [0.0, 0.04, math.nan]])
    spec = spec_of(make_coloured_text_figure(weights, list("abc"), focus=11, first=10))
    heat = spec["data"][0]
    assert decode(heat["z"]).tolist() == [[127, 64, MASKED_LEVEL], [0, 254, MASKED_LEVEL]]  # 254 * w / 0.04
    bar = heat["colorbar"]
    assert bar["ticktext"] == ["0", "0.01", "0.02", "0.03", "0.04"] and bar["tickvals"][-1] == MASKED_LEVEL - 1
    assert heat.get("showscale", True)
    assert heat["x"][0] == "10 a"  # a page of a longer text keeps the tokens' own indices
    assert decode(spec["data"][1]["customdata"])[:, 0].tolist() == [10, 11, 12, 10, 11, 12]
    assert spec["layout"]["shapes"][0]["x0"] == 0.5  # token 11 is the page's second cell
    assert clicked_token({"selection": {"points": [{"x": "12 c", "customdata": [12, 0.0]}]}}) == 12


def test_a_long_row_has_no_gaps_that_would_grey_it_out():
    spec = spec_of(make_coloured_text_figure(torch.rand(2, 256), ["x"] * 256))
    assert spec["data"][0]["xgap"] == 0 and spec["data"][0]["ygap"] == 1
    assert spec_of(make_coloured_text_figure(torch.rand(2, 12), ["x"] * 12))["data"][0]["xgap"] == 1


def test_running_text_wraps_lines_and_hovers_and_clicks_each_token():
    labels = ["The", "cat", "⏎", "sat", "a" * 30]
    w = torch.tensor([0.5, 0.25, 0.125, 0.125, math.nan])
    lines, columns, shown = running_lines(labels, line_chars=8)
    assert lines.tolist() == [0, 0, 1, 2, 3] and columns.tolist() == [0, 4, 0, 0, 0]  # ⏎ ends its line
    assert shown[4] == "a" * 23 + "…"
    spec = spec_of(make_running_text_figure(w, labels, focus=102, first=100, share=(0.25, 0.0), line_chars=8))
    bar = spec["data"][0]
    assert bar["type"] == "bar" and bar["orientation"] == "h"
    assert decode(bar["marker"]["color"]).tolist() == [254, 127, 64, 64, MASKED_LEVEL]
    assert bar["marker"]["colorbar"]["ticktext"][-1] == "0.5"
    exact = decode(bar["customdata"])
    assert exact[:4].tolist() == [[100, 0.5], [101, 0.25], [102, 0.125], [103, 0.125]] and math.isnan(exact[4, 1])
    assert "%{customdata[1]:.5f}" in bar["hovertemplate"] and bar["hovertext"][0] == "100 The"
    assert bar["marker"]["line"]["width"] == [0, 0, 3, 0, 0]  # the chosen token is outlined
    notes = [a["text"] for a in spec["layout"]["annotations"]]
    assert "0.250" in notes[0] and "0.000" in notes[1]
    assert clicked_token({"selection": {"points": [{"x": 3.8, "y": 0, "customdata": [101, 0.25]}]}}) == 101
    # as Streamlit hands it back: a row of a binary array is an object keyed by position
    assert clicked_token({"selection": {"points": [{"x": 3.8, "customdata": {"0": 103, "1": 0.125}}]}}) == 103


def test_where_the_weight_lies_around_the_page_and_across_the_text():
    row = torch.tensor([[0.5, 0.25, 0.125, 0.125], [0.0, 1.0, 0.0, 0.0]])
    spec = spec_of(make_window_share_figure(window_share(row, 1, 3), ["H0", "H1"]))
    assert [decode(t["x"]).tolist() for t in spec["data"]] == [[0.5, 0.0], [0.375, 1.0], [0.125, 0.0]]
    assert spec["layout"]["barmode"] == "stack" and "1–2" in spec["data"][1]["name"]
    pooled = pooled_overview(row, n_bins=2)
    spec = spec_of(make_pooled_overview_figure(pooled, ["H0", "H1"], window=(1, 3), focus=2))
    heat = spec["data"][0]
    assert decode(heat["z"]).tolist() == [[0.75, 0.25], [1.0, 0.0]] and decode(heat["x"]).tolist() == [0.5, 2.5]
    assert decode(heat["customdata"])[0].tolist() == [[0, 1], [2, 3]]  # each bin's first and last token
    assert "%{z:.4f}" in heat["hovertemplate"]
    window, focus = spec["layout"]["shapes"]
    assert (window["x0"], window["x1"], focus["x0"]) == (0.5, 2.5, 2)


def test_64_heads_get_64_distinct_colours_and_neighbours_differ():
    colors = head_colors(64)
    rgb = np.array([[int(c[i : i + 2], 16) for i in (1, 3, 5)] for c in colors], dtype=float)
    distance = np.linalg.norm(rgb[:, None] - rgb[None], axis=-1)
    assert len(set(colors)) == 64 and distance[~np.eye(64, dtype=bool)].min() > 15
    assert np.diag(distance, 1).min() > 60  # H4 and H5 never look alike
    twelve = head_colors(12)
    assert len(set(twelve)) == 12 and twelve[4] != twelve[11]


def test_line_view_legend_swatches_are_solid_markers_in_each_heads_colour():
    w = torch.full((16, 4, 4), 0.25)
    spec = spec_of(make_line_view_figure(w, list("abcd"), heads_on=[5]))
    legend = [t for t in spec["data"] if t.get("legendgroup") and t.get("showlegend", True)]
    assert [t["name"] for t in legend] == [f"H{h}" for h in range(16)]
    assert all(t["mode"] == "markers" and t["marker"]["size"] == LEGEND_SWATCH for t in legend)
    assert [t["marker"]["color"] for t in legend] == head_colors(16)
    assert spec["layout"]["legend"]["itemsizing"] == "constant"
    shown = {t["name"] for t in spec["data"] if t.get("legendgroup") and t.get("visible", True) is True}
    assert shown == {"H5"}  # one head picked: the others wait in the legend

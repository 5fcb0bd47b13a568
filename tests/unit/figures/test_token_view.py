"""One token's attention against the full weights of the embedded model, and the figures that draw it."""

import math

import numpy as np
import pytest
import torch

from attnviz.figures.token_view import (
    CELL_CHARS,
    MASKED_LEVEL,
    clicked_token,
    make_coloured_text_figure,
    make_line_view_figure,
)
from tests.plotly_json import decode, spec_of


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

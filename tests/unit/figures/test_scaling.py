"""The Scaling page's figures: every head under each scale on one colour scale, Var(q·k) against d_k, the gradient."""

from types import SimpleNamespace

import pandas as pd
import pytest

from attnviz.figures.scaling import (
    make_gradient_figure,
    make_layer_variance_figure,
    make_scaling_overview_figure,
    make_variance_figure,
)
from attnviz.labs.scaling import SCALE_KINDS, scale_titles
from tests.plotly_json import decode, spec_of


def test_one_heatmap_per_scale_titled_in_the_readers_words():
    rows = [
        {
            "layer": layer,
            "head": head,
            **{f"saturated_share_{kind}": 0.1 * (i + 1) for i, kind in enumerate(SCALE_KINDS)},
        }
        for layer in range(2)
        for head in range(3)
    ]
    fig = spec_of(make_scaling_overview_figure(pd.DataFrame(rows), "saturated_share", scale_titles()))
    assert len(fig["data"]) == 3 and [a["text"] for a in fig["layout"]["annotations"]] == [
        str(title) for title in scale_titles().values()
    ]
    assert decode(fig["data"][1]["z"]).shape == (2, 3) and decode(fig["data"][1]["z"])[0, 0] == pytest.approx(0.2)
    assert {trace["zmin"] for trace in fig["data"]} == {0.0} and {trace["zmax"] for trace in fig["data"]} == {1.0}
    # the colour bar names the statistic in words, never by its column name
    assert fig["data"][-1]["colorbar"]["title"]["text"] == "share of saturated rows"
    assert "saturated_share" not in fig["data"][0]["hovertemplate"]


def test_variance_follows_d_k_and_the_layers_sit_on_their_ratio():
    random = pd.DataFrame({"d_k": [4, 64], "var_unscaled": [4.1, 63.0], "var_scaled": [1.02, 0.98]})
    fig = spec_of(make_variance_figure(random))
    assert [decode(trace["y"]).tolist() for trace in fig["data"]] == [[4.1, 63.0], [1.02, 0.98], [4, 64]]  # y = d_k
    layers = spec_of(make_layer_variance_figure(pd.DataFrame({"layer": [0, 1], "ratio_to_dk": [1.7, 26.0]}), 64))
    assert layers["data"][0]["x"] == ["L0", "L1"] and "d_k = 64" in layers["data"][0]["name"]


def test_the_gradient_curve_marks_each_scale_where_it_sits():
    curve = SimpleNamespace(
        multiples=[0.5, 1.0, 8.0],
        jacobian_norm=[0.4, 0.3, 0.01],
        grad_scores_norm=[1.0, 0.9, 0.1],
        grad_q_norm=[1.0, 0.8, 0.05],
        vanishing_share=[0.0, 0.0, 0.5],
    )
    markers = {"sqrt_dk": 1.0, "none": 8.0, "sqrt_dmodel": 0.5}
    fig = spec_of(make_gradient_figure(curve, markers, scale_titles()))
    assert len(fig["data"]) == 4 and len(fig["layout"]["shapes"]) == 3
    assert sorted(shape["x0"] for shape in fig["layout"]["shapes"]) == [0.5, 1.0, 8.0]

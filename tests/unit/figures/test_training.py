"""The Training page's library: the retrieval task, the three scales, validation, determinism and the effect."""

import math

import pytest

from attnviz.figures.training import make_training_figure
from attnviz.labs.scaling import SCALE_KINDS
from tests.plotly_json import decode, spec_of


def test_training_figure_draws_both_curves_for_each_run():
    losses = {"sqrt_dk": [2.0, 1.0, 0.5], "none": [2.0, math.nan, 2.0]}
    accuracies = {"sqrt_dk": [0.1, 0.5, 1.0], "none": [0.1, 0.1, 0.2]}
    spec = spec_of(make_training_figure(losses, accuracies, steps=300, n_values=16, smooth=2))
    traces = spec["data"]
    assert [t["name"] for t in traces] == ["1/√d_k (correct)"] * 2 + ["no scale"] * 2
    assert decode(traces[0]["y"]).tolist() == [2.0, 1.5, 0.75] and decode(traces[1]["y"]).tolist() == pytest.approx(
        [0.1, 0.3, 0.75]
    )
    assert math.isnan(decode(traces[2]["y"])[1])  # a diverged step is a gap
    assert spec["layout"]["xaxis"]["range"] == [1, 300]
    assert spec["layout"]["shapes"][0]["y0"] == pytest.approx(math.log(16))
    empty = spec_of(make_training_figure({k: [] for k in SCALE_KINDS}, {}, steps=10, n_values=4))
    assert len(empty["data"]) == 6

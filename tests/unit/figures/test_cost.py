"""Figure builders: the values that reach the browser, their types and the payload size."""

import numpy as np
import pytest

from tests.plotly_json import decode, spec_of
from tests.tolerances import bound


def test_cost_figure_has_a_line_per_path_the_prediction_and_the_limit():
    from attnviz.figures.cost import make_cost_figure

    rows = [{"path": p, "tokens": n, "peak_mb": n / 100} for p in ("naive", "fused") for n in (256, 512)]
    titles = {"naive": "naive", "fused": "fused", "chunked": "chunked"}
    spec = spec_of(make_cost_figure(rows, "peak_mb", titles, predicted=[(512, 5.0), (4096, 300.0)], limit=4096))
    names = [trace["name"] for trace in spec["data"]]
    assert names == ["naive", "fused", "naive, predicted (2 · n_head · n² floats)"]  # no chunked rows: no line
    assert decode(spec["data"][1]["y"]).tolist() == pytest.approx([2.56, 5.12])
    assert spec["layout"]["shapes"][0]["x0"] == 4096 and "4,096" in spec["layout"]["annotations"][0]["text"]
    assert spec["layout"]["xaxis"]["type"] == spec["layout"]["yaxis"]["type"] == "log"


def test_tiling_figure_draws_every_block_and_the_exact_weights():
    from attnviz.figures.cost import make_tiling_figure
    from attnviz.labs.cost.paths import tiling_example

    example = tiling_example(10, 4)
    spec = spec_of(make_tiling_figure(example.steps, example.weights))
    assert len(spec["data"]) == 2 * 3 + 1  # scores and weights per block (4 + 4 + 2 keys), then the exact line
    tiled = np.concatenate([decode(spec["data"][i]["y"]) for i in (1, 3, 5)])
    # the blocks' rescaled weights against the whole row's softmax: two routes (tests/tolerances.py)
    assert np.allclose(tiled, example.weights.numpy(), atol=bound("attention"), rtol=0)

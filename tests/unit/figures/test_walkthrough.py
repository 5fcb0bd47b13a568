"""The walkthrough: its steps compose to the layer's own forward, and the code it shows is the code that ran."""

import pytest
import torch

from attnviz.figures.walkthrough import make_step_figure, make_tensor_heatmap_figure
from tests.plotly_json import decode, spec_of


def test_figures_escape_tokens_grey_masked_cells_and_centre_on_zero():
    values = torch.tensor([[1.0, float("-inf")], [-3.0, 2.0]])
    fig = make_tensor_heatmap_figure(values, ["0 <b>x</b>", "1 y"], ["0 <b>x</b>", "1 y"], axes=("query", "key"))
    spec = spec_of(fig)["data"][0]
    z = decode(spec["z"]).reshape(2, 2)
    assert z.dtype == "float32" and z[0, 0] == 1.0 and (z[0, 1] != z[0, 1])  # -inf drawn as a grey gap
    assert spec["zmin"] == -3.0 and spec["zmax"] == 3.0 and spec["zmid"] == 0.0
    assert spec["y"][0] == "0 &lt;b&gt;x&lt;/b&gt;"
    weights = make_step_figure(
        torch.tensor([[1.0, 0.0], [0.5, 0.5]]),
        ["0 <i>", "1 b"],
        ["0 <i>", "1 b"],
        weights=True,
        visible=torch.tensor([[True, False], [True, True]]),
    )
    spec = spec_of(weights)["data"][0]
    assert spec["zmin"] == 0.0 and spec["zmax"] == 1.0 and spec["x"][0] == "0 &lt;i&gt;"
    assert decode(spec["z"]).reshape(2, 2)[0, 1] != decode(spec["z"]).reshape(2, 2)[0, 1]
    with pytest.raises(ValueError, match="do not match"):
        make_tensor_heatmap_figure(values, ["a"], ["b", "c"])

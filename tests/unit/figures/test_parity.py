"""Figure builders: the values that reach the browser, their types and the payload size."""

import math

import pytest
import torch

from attnviz.figures.parity import make_parity_figure
from attnviz.models.record import PARITY_TOLERANCE
from tests.plotly_json import spec_of


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

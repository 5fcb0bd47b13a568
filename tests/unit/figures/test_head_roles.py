"""Head roles, similarity and the sink against length, on hand-made patterns whose answers are known."""

import numpy as np
import pandas as pd

from attnviz.figures.head_roles import (
    make_head_roles_figure,
    make_head_similarity_figure,
    make_role_stability_figure,
    make_sink_vs_length_figure,
)
from attnviz.labs import head_roles as hr
from tests.unit.labs.role_patterns import known_roles_record


def test_figures():
    record = known_roles_record()
    roles = hr.head_roles(record)
    fig = make_head_roles_figure(roles)
    assert fig.data[0].type == "heatmap" and np.asarray(fig.data[0].z).shape == (2, 4)
    similarity = hr.head_similarity(record)
    fig = make_head_similarity_figure(similarity, threshold=0.05)
    assert np.asarray(fig.data[0].z).shape == (8, 8)
    assert len(fig.layout.shapes) == 4  # each of the four kinds appears twice
    stability = pd.DataFrame({"layer": [0, 0], "head": [0, 1], "role": ["sink", "self"], "share": [1.0, 0.5]})
    assert np.asarray(make_role_stability_figure(stability).data[0].z).shape == (1, 2)
    sinks = pd.DataFrame(
        {
            "length": [8, 8, 16, 16],
            "layer": [0, 0, 0, 0],
            "head": [0, 1, 0, 1],
            "first_token_weight": [0.5, 0.1, 0.6, 0.1],
        }
    )
    fig = make_sink_vs_length_figure(sinks, top=1)
    assert [t.name for t in fig.data] == ["L0 mean", "L0 H0"]


def test_the_roles_legend_sits_above_the_grid():
    record = known_roles_record()
    fig = make_head_roles_figure(hr.head_roles(record))
    legend, margin = fig.layout.legend, fig.layout.margin
    assert legend.orientation == "h" and legend.y >= 1.0 and legend.yanchor == "bottom"
    assert margin.t >= 100  # room for the title and a row of legend entries above the plot
    assert fig.layout.xaxis.side in (None, "bottom")  # the head labels stay below, away from the legend

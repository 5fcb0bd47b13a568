"""Token maps drawn in columns (issue 25): each is built for the width its column gives, every label shown at 13
tokens, so the browser neither squeezes it nor leaves half the column empty."""

import torch

from attnviz.core.masks import causal_mask
from attnviz.figures.base import COLORBAR_PX, column_width
from attnviz.figures.heads import make_pooled_head_figure
from attnviz.figures.masks import make_difference_figure, make_mask_figure, make_masked_weights_figure
from attnviz.figures.walkthrough import make_step_figure
from tests.plotly_json import spec_of
from tests.unit.figures.attention_maps import random_attention
from tests.unit.figures.test_base import THIRTEEN


def plot_size(layout: dict) -> tuple[int, int]:
    margin = layout["margin"]
    return layout["width"] - margin["l"] - margin["r"], layout["height"] - margin["t"] - margin["b"]


def test_the_mask_labs_maps_fill_their_column_with_square_cells_and_every_label():
    """The Mask lab draws its maps two a row: before, the weights maps were built wider than their column (squeezed
    into tall cells) and the mask beside them was a height of its own."""
    half = column_width(2)
    keep = causal_mask(13)
    weights = random_attention(13, 13).masked_fill(~keep, 0.0)
    leak = torch.zeros(13, 13, dtype=torch.bool)
    leak[0, 1] = True
    for fig in (
        make_mask_figure(keep, THIRTEEN),
        make_mask_figure(keep, THIRTEEN, problems={"future_leak": leak}),  # its legend below
        make_masked_weights_figure(weights, THIRTEEN, keep),
        make_difference_figure(weights - weights.T, THIRTEEN),
    ):
        layout = spec_of(fig)["layout"]
        width, height = plot_size(layout)
        assert width == height and 0.9 * half <= layout["width"] <= half, (layout["width"], width, height)
        assert layout["xaxis"]["tickvals"] == layout["yaxis"]["tickvals"] == THIRTEEN
        assert layout["margin"]["r"] == COLORBAR_PX  # with a colour bar or not: all four maps the same size


def test_a_walkthrough_step_fits_the_left_of_its_two_columns():
    layout = spec_of(make_step_figure(random_attention(13, 13), THIRTEEN, THIRTEEN, weights=True))["layout"]
    assert 0.9 * column_width(2) <= layout["width"] <= column_width(2)
    assert layout["xaxis"]["tickvals"] == THIRTEEN


def test_a_pooled_map_fits_the_column_beside_a_tall_grid():
    beside = column_width((2, 3), 1, gap_px=32)
    layout = spec_of(make_pooled_head_figure(torch.rand(63, 63), 32, 2000, 2000, max_side=480, max_width=beside))[
        "layout"
    ]
    width, height = plot_size(layout)
    assert layout["width"] == beside and width == height < 480

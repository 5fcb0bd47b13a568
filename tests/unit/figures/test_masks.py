"""The Mask lab's figures: the mask with each problem's cells marked, a head under it, the difference, the leak test."""

import pytest
import torch

from attnviz.figures.masks import (
    make_difference_figure,
    make_leak_figure,
    make_mask_figure,
    make_masked_weights_figure,
)
from attnviz.i18n.message import msg
from tests.plotly_json import decode, spec_of

LABELS = ["0 a", "1 b", "2 c"]
CAUSAL = torch.ones(3, 3, dtype=torch.bool).tril()


def test_the_mask_is_kept_and_hidden_cells_and_each_problem_is_marked_where_it_is():
    leak = torch.zeros(3, 3, dtype=torch.bool)
    leak[0, 2] = True
    fig = spec_of(make_mask_figure(CAUSAL, LABELS, problems={"future_leak": leak}, title=msg("masks.fig_mask")))
    assert decode(fig["data"][0]["z"]).tolist() == CAUSAL.int().tolist()
    marks = fig["data"][1]
    assert marks["x"] == ["2 c"] and marks["y"] == ["0 a"] and marks["name"] == "future_leak (1)"
    assert fig["layout"]["title"]["text"] == str(msg("masks.fig_mask"))  # a message, said in the reader's words


def test_a_mask_that_is_not_a_square_bool_is_refused():
    with pytest.raises(ValueError, match=r"\(3, 3\) bool"):
        make_mask_figure(CAUSAL.float(), LABELS)


def test_a_head_under_a_mask_greys_what_it_hides_and_the_difference_is_drawn_as_is():
    weights = torch.full((3, 3), 1 / 3)
    fig = spec_of(make_masked_weights_figure(weights, LABELS, CAUSAL))
    z = decode(fig["data"][0]["z"])
    assert z.shape == (3, 3) and torch.isnan(torch.tensor(z[0, 1])) and z[2, 2] == pytest.approx(1 / 3)
    difference = spec_of(make_difference_figure(torch.eye(3) * 0.5, LABELS))
    assert decode(difference["data"][0]["z"])[1, 1] == pytest.approx(0.5)


def test_the_leak_test_marks_rows_over_the_tolerance_and_where_the_text_was_changed():
    change = torch.tensor([0.0, 1e-9, 0.5])
    fig = spec_of(make_leak_figure(change, LABELS, tolerance=1e-6, cuts=[2]))
    bars = fig["data"][0]
    assert bars["x"] == LABELS and bars["marker"]["color"][:2] == ["#2ca02c", "#2ca02c"]
    assert bars["marker"]["color"][2] != "#2ca02c"  # the row that moved: a leak
    assert fig["data"][1]["y"] == [1e-6, 1e-6] and fig["layout"]["shapes"][0]["x0"] == 1.5
    untested = spec_of(make_leak_figure(torch.tensor([float("nan"), 0.1, 0.2]), LABELS, 1e-6, []))
    assert untested["data"][0]["x"] == ["1 b", "2 c"]  # a row the test did not cover is not drawn

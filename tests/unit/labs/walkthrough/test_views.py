"""The walkthrough: its steps compose to the layer's own forward, and the code it shows is the code that ran."""

import pytest
import torch

from attnviz.labs.walkthrough import views
from attnviz.labs.walkthrough.steps import walk
from attnviz.labs.walkthrough.views import HEATMAP_SIDE, TABLE_COLS, TABLE_ROWS, shows_numbers, step_view, view_table
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel


def test_views_are_cut_to_their_bounds_and_say_so():
    model = EmbeddedModel(EmbeddedConfig(d_model=64, n_head=4, n_layer=1, causal=True))
    text = " ".join(f"w{i}" for i in range(200))
    result = walk(model.attention_layer(text, 200, 0))
    weights = step_view(result.step("softmax"), 3, result, numbers=False)
    assert weights.values.shape == (HEATMAP_SIDE, HEATMAP_SIDE) and weights.weights
    assert str(weights.note) == f"Showing query rows 0–{HEATMAP_SIDE - 1} of 200 and keys 0–{HEATMAP_SIDE - 1} of 200."
    assert torch.equal(weights.values, result.step("softmax").tensors["weights"][0, 3, :HEATMAP_SIDE, :HEATMAP_SIDE])
    assert torch.equal(weights.visible, result.mask[:HEATMAP_SIDE, :HEATMAP_SIDE])
    # before the split, the columns start at the chosen head's features
    projected = step_view(result.step("project"), 2, result, numbers=True)
    assert projected.values.shape == (TABLE_ROWS, TABLE_COLS)
    assert projected.col_labels[0] == "H2·0" and projected.row_labels[0] == "0 w0"
    assert torch.equal(projected.values, result.step("project").tensors["q"][0, :TABLE_ROWS, 32 : 32 + TABLE_COLS])
    last = step_view(result.step("project"), 3, result, numbers=True)
    assert last.col_labels[0] == "H3·0" and "features 48–59 of 64" in str(last.note)
    assert views._window(60, 12, 64) == (52, 64)  # a window near the end moves back so it fits
    table = view_table(step_view(result.step("mask"), 0, result, numbers=True))
    assert table.shape == (TABLE_ROWS, TABLE_COLS) and table.iloc[0, 1] == float("-inf")
    short = walk(model.attention_layer("one two three", 64, 0))
    whole_view = step_view(short.step("scale"), 0, short, numbers=True)
    assert whole_view.values.shape == (3, 3) and whole_view.note == ""
    assert shows_numbers("auto", 12) and not shows_numbers("auto", 13)
    assert shows_numbers("numbers", 500) and not shows_numbers("heatmap", 3)
    with pytest.raises(ValueError, match="view"):
        shows_numbers("pictures", 3)

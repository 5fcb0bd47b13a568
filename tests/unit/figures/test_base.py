"""Figure builders: the values that reach the browser, their types and the payload size."""

import numpy as np
import pytest
import torch

from attnviz.core.masks import causal_mask
from attnviz.figures.base import hover_text, make_head_heatmap_figure
from tests.plotly_json import decode, spec_of
from tests.unit.figures.attention_maps import random_attention


def test_large_heatmap_sends_exact_float32_weights_with_hover():
    w = random_attention(5, 5)
    labels = ["0 the", "1 cat", "2 the", "3 dog", "4 ."]
    spec = spec_of(make_head_heatmap_figure(w, labels, labels, title="L0 H1"))
    trace = spec["data"][0]
    z = decode(trace["z"])
    assert trace["z"]["dtype"] == "f4"
    assert np.array_equal(z, w.numpy().astype(np.float32))
    assert trace["x"] == labels and trace["y"] == labels  # repeated "the" stays two rows
    assert "weight %{z" in trace["hovertemplate"]
    assert (trace["zmin"], trace["zmax"]) == (0.0, 1.0)


def test_masked_cells_are_gaps_on_a_grey_background():
    w = random_attention(4, 4).tril()
    spec = spec_of(make_head_heatmap_figure(w, list("abcd"), list("efgh"), mask=causal_mask(4)))
    z = decode(spec["data"][0]["z"])
    assert np.isnan(z[0, 1:]).all() and not np.isnan(z[np.tril_indices(4)]).any()
    assert spec["layout"]["plot_bgcolor"] == "#d4d4d4"


def test_label_mismatch_is_an_error():
    with pytest.raises(ValueError, match="do not match"):
        make_head_heatmap_figure(torch.zeros(2, 3), ["a", "b"], ["a", "b"])


def test_user_text_on_hover_is_escaped_wrapped_and_bounded():
    assert hover_text("<b>%{z}</b> & co") == "&lt;b&gt;&#37;{z}&lt;/b&gt; &amp; co"  # no markup, no variable
    assert hover_text("abcdefg", width=3, lines=5) == "abc<br>def<br>g"
    assert hover_text("abcdefg", width=2, lines=2) == "ab<br>cd<br>… 3 more characters"
    assert hover_text("") == ""


def test_cut_labels_get_their_row_and_column_again_with_the_whole_text_on_hover():
    w = torch.softmax(torch.randn(3, 3), -1)
    cut, whole = ["0 a", "1 bb…", "2 c"], ["0 a", "1 bbbbbbbb", "2 c"]
    spec = spec_of(make_head_heatmap_figure(w, cut, cut, q_hover=whole, k_hover=whole))
    _, row, column = spec["data"]
    assert row["y"] == ["1 bb…", "2 c"] and column["x"] == ["1 bb…", "2 c"]
    assert decode(row["z"])[0].tolist() == pytest.approx(w[1].tolist()) and np.isnan(decode(row["z"])[1]).all()
    assert decode(column["z"])[:, 0].tolist() == pytest.approx(w[:, 1].tolist())
    assert "query 1 bbbbbbbb<br>" in row["hovertemplate"] and "key 1 bbbbbbbb<br>" in column["hovertemplate"]
    assert len(spec_of(make_head_heatmap_figure(w, whole, whole, q_hover=whole, k_hover=whole))["data"]) == 1

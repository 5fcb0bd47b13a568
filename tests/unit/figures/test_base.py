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


def test_a_256_token_window_is_square_with_labels_thinned_so_none_overlap():
    from attnviz.figures.base import COLORBAR_PX, LABEL_PX, SLANTED_LABEL_PX, heatmap_plot_size

    labels = [f"{i} tok{i}" for i in range(256)]
    spec = spec_of(make_head_heatmap_figure(torch.full((256, 256), 1 / 256), labels, labels, max_side=480))
    layout = spec["layout"]
    assert heatmap_plot_size(256, 256, 480) == (480, 480)  # square cells, 480 / 256 = 1.875 px each
    margin = layout["margin"]
    assert layout["width"] - margin["l"] - margin["r"] == 480 and layout["height"] - margin["t"] - margin["b"] == 480
    assert margin["r"] == COLORBAR_PX and spec["data"][0]["colorbar"]["len"] == 1.0  # the bar is the plot's height
    assert spec["data"][0]["colorbar"]["lenmode"] == "fraction"
    # queries: 256 * 18 / 480 = 9.6 px -> every 10th token, 26 labels 18.5 px apart; keys, slanted on top:
    # 256 * 28 / 480 = 14.9 -> every 20th, 13 labels 36.9 px apart
    for axis, step, px in (("yaxis", 10, LABEL_PX), ("xaxis", 20, SLANTED_LABEL_PX)):
        ticks = layout[axis]["tickvals"]
        assert ticks == labels[::step] and layout[axis]["ticktext"] == ticks
        assert 480 / len(ticks) >= px
    assert spec["data"][0]["x"] == labels  # every token still has its column (and its whole label on hover)


def test_a_few_tokens_get_large_cells_and_every_label():
    from attnviz.figures.base import heatmap_plot_size

    assert heatmap_plot_size(1, 1) == (320, 320)  # the smallest side
    assert heatmap_plot_size(5, 5) == (320, 320)  # 64 px a token, the largest cell
    assert heatmap_plot_size(20, 20) == (640, 640)  # the largest side: 32 px a token
    assert heatmap_plot_size(10, 40) == (640, 160)  # 10 queries x 40 keys: wide, square cells
    labels = ["0 a", "1 b", "2 c", "3 d", "4 e"]
    layout = spec_of(make_head_heatmap_figure(random_attention(5, 5), labels, labels))["layout"]
    assert layout["xaxis"]["tickvals"] == labels and layout["yaxis"]["tickvals"] == labels


def test_a_chinese_vertical_axis_title_is_written_across_and_an_english_one_is_left_alone():
    import plotly.graph_objects as go

    from attnviz.figures.base import upright_axis_titles

    english = go.Figure(go.Scatter(y=[1, 2]), layout={"yaxis": {"title": {"text": "weight"}}})
    assert upright_axis_titles(english) is english
    chinese = go.Figure(go.Scatter(y=[1, 2]), layout={"yaxis": {"title": {"text": "权重"}}, "margin": {"t": 10}})
    upright = upright_axis_titles(chinese)
    assert chinese.layout.yaxis.title.text == "权重" and not chinese.layout.annotations  # the input is not changed
    assert upright.layout.yaxis.title.text is None
    (note,) = upright.layout.annotations
    assert (note.text, note.textangle, note.x, note.y, note.yanchor) == ("权重", 0, 0.0, 1.0, "bottom")
    assert upright.layout.margin.t == 50  # room above the plot for it


WORDS = ("The", "trophy", "did", "not", "fit", "in", "the", "suitcase", "because", "it", "was", "big", ".")
THIRTEEN = [f"{i} {word}" for i, word in enumerate(WORDS)]  # the embedded model's 13 tokens of a 13-word sentence


def test_a_13_token_map_labels_every_token_on_the_page_and_in_a_column():
    """Issue 25: the key axis labelled every other token at 13 tokens."""
    w = random_attention(13, 13)
    layout = spec_of(make_head_heatmap_figure(w, THIRTEEN, THIRTEEN))["layout"]
    assert layout["xaxis"]["tickvals"] == THIRTEEN and layout["xaxis"]["ticktext"] == THIRTEEN
    assert layout["yaxis"]["tickvals"] == THIRTEEN

    from attnviz.figures.base import column_width

    layout = spec_of(make_head_heatmap_figure(w, THIRTEEN, THIRTEEN, max_width=column_width(2)))["layout"]
    assert layout["xaxis"]["tickvals"] == THIRTEEN and layout["yaxis"]["tickvals"] == THIRTEEN


def test_labels_are_thinned_by_nice_steps_only_where_they_would_overlap():
    from attnviz.figures.base import LABEL_PX, SLANTED_LABEL_PX, thinned_ticks

    assert 16 <= LABEL_PX <= 18 and SLANTED_LABEL_PX * 0.866 >= LABEL_PX  # slanted at -60°: LABEL_PX across lines
    labels = [str(i) for i in range(1000)]
    for n, plot_px, px, step in (
        (13, 250, SLANTED_LABEL_PX, 1),  # 13 keys in a column: 19 px each, every one
        (40, 640, SLANTED_LABEL_PX, 2),  # 16 px each: every other
        (100, 640, SLANTED_LABEL_PX, 5),
        (40, 640, LABEL_PX, 1),  # upright query labels need less
        (512, 640, LABEL_PX, 20),
        (1000, 300, LABEL_PX, 100),
    ):
        ticks = thinned_ticks(labels[:n], plot_px, px)["tickvals"]
        assert ticks == labels[:n:step], (n, plot_px, px)
        assert plot_px / -(-n // step) >= px  # none overlap
        if step > 1:  # and the next smaller nice step would
            smaller = {2: 1, 5: 2, 20: 10, 100: 50}[step]
            assert plot_px / -(-n // smaller) < px


def test_a_short_text_fills_the_width_its_page_or_column_gives_with_square_cells():
    """Issue 25: a 13-token map took half the page (a 320-px plot beside 400 px of nothing)."""
    from attnviz.figures.base import COLORBAR_PX, PAGE_WIDTH_PX, column_width

    assert column_width() == PAGE_WIDTH_PX and column_width(2) == column_width((1, 1), 1) == 462
    assert column_width((2, 3), 1, gap_px=32) == 544  # the Heads page's large view beside a tall grid (548 drawn)
    for bad in ((0, 0), ((1, 0), 1), (2, 2)):
        with pytest.raises(ValueError, match="no column"):
            column_width(*bad)
    w = random_attention(13, 13)
    for max_width in (PAGE_WIDTH_PX, column_width(2), column_width(3)):
        layout = spec_of(make_head_heatmap_figure(w, THIRTEEN, THIRTEEN, max_width=max_width))["layout"]
        margin = layout["margin"]
        plot_w, plot_h = layout["width"] - margin["l"] - margin["r"], layout["height"] - margin["t"] - margin["b"]
        assert plot_w == plot_h and margin["r"] == COLORBAR_PX  # square cells, the colour bar beside them
        assert 0.85 * max_width <= layout["width"] <= max_width, max_width
    one = spec_of(make_head_heatmap_figure(random_attention(1, 1), ["0 a"], ["0 a"]))["layout"]
    assert one["width"] - one["margin"]["l"] - one["margin"]["r"] == 320  # one token is not drawn 640 px wide

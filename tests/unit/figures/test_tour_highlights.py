"""The tour's marks land where the step's sentence points, and leave the page's figure itself alone."""

import copy

import numpy as np
import plotly.graph_objects as go
import pytest

from attnviz.figures import tour
from attnviz.figures.base import make_head_heatmap_figure


def heatmap(n: int = 4) -> go.Figure:
    w = np.tril(np.ones((n, n), np.float32))
    w /= w.sum(axis=1, keepdims=True)
    labels = [f"t{i}" for i in range(n)]
    return make_head_heatmap_figure(w, labels, labels)


def frames(fig: go.Figure) -> list:
    return [shape for shape in fig.layout.shapes if (shape.name or "").startswith("tour_")]


def test_a_row_frame_spans_the_row_and_every_column():
    fig = heatmap(4)
    before = copy.deepcopy(fig.data)
    tour.highlight_row(fig, 2, 4)
    (shape,) = frames(fig)
    assert (shape.x0, shape.x1, shape.y0, shape.y1) == (-0.5, 3.5, 1.5, 2.5)
    assert shape.line.color == tour.HIGHLIGHT_COLOR
    assert fig.data == before  # the page's traces, untouched


def test_adjacent_rows_share_one_frame():
    fig = heatmap(8)
    tour.highlight_rows(fig, [6, 2, 3, 4], 8)
    assert [(s.name, s.y0, s.y1) for s in frames(fig)] == [("tour_rows_2_4", 1.5, 4.5), ("tour_rows_6_6", 5.5, 6.5)]
    tour.highlight_rows(fig, [], 8)
    assert len(frames(fig)) == 2


def test_column_cell_and_box_frames():
    fig = heatmap(5)
    tour.highlight_column(fig, 1, 5)
    tour.highlight_cell(fig, 3, 0)
    tour.highlight_box(fig, 0.5, 2.5, -0.5, 1.5, xref="x2", yref="y2")
    column, cell, box = frames(fig)
    assert (column.x0, column.x1, column.y0, column.y1) == (0.5, 1.5, -0.5, 4.5)
    assert (cell.x0, cell.x1, cell.y0, cell.y1) == (-0.5, 0.5, 2.5, 3.5)
    assert (box.xref, box.yref, box.x0, box.y1) == ("x2", "y2", 0.5, 1.5)


def test_traces_not_named_are_dimmed_and_the_named_kept():
    fig = go.Figure([go.Scatter(y=[1, 2], name="a"), go.Scatter(y=[2, 1], name="b"), go.Scatter(y=[0, 0], name="c")])
    tour.highlight_traces(fig, ["b"])
    assert [trace.opacity for trace in fig.data] == [tour.DIMMED_OPACITY, None, tour.DIMMED_OPACITY]


def test_a_mark_on_no_trace_is_an_error():
    fig = go.Figure([go.Scatter(y=[1, 2], name="a")])
    with pytest.raises(ValueError, match="no trace named"):
        tour.highlight_traces(fig, ["missing"])


def test_a_vertical_mark_at_the_setting():
    fig = go.Figure([go.Scatter(x=[0.5, 1, 2], y=[1, 2, 3], name="a")])
    tour.mark_x(fig, 1.0, "1/√d_k")
    (line,) = fig.layout.shapes
    assert (line.x0, line.x1, line.type) == (1.0, 1.0, "line")
    assert fig.layout.annotations[0].text == "1/√d_k"

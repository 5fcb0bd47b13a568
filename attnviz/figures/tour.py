"""The tour's highlights: what a step's sentence talks about, marked on the figure its page already draws.

A step never builds a second version of a page's figure: it takes the figure the page's own ``make_*`` function
returns and adds a mark here (a frame round a row, a cell or a tile; other curves dimmed; a line at a setting's
value). Marks are layout shapes and annotations, so the figure's traces, and every number in them, are the page's.

Coordinates are the figure's data coordinates. On a category axis (tokens) Plotly places category ``i`` at ``i``,
so a row's frame runs from ``i - 0.5`` to ``i + 0.5`` whatever the labels say; ``xref``/``yref`` name a subplot's
axes ("x2", "y2") where the figure has several.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

HIGHLIGHT_COLOR = "#ff2d95"  # a magenta no weight colour scale uses: seen on Viridis' purples and yellows alike
HIGHLIGHT_WIDTH = 3
DIMMED_OPACITY = 0.25  # the curves a step does not talk about: visible for comparison, clearly behind
LOSS_COLOR, DISTANCE_COLOR = "#1f77b4", "#2ca02c"  # the heads sweep's two axes, each in its curves' colour


def _frame(fig: go.Figure, x0: float, x1: float, y0: float, y1: float, xref: str, yref: str, name: str) -> go.Figure:
    fig.add_shape(
        type="rect",
        x0=x0,
        x1=x1,
        y0=y0,
        y1=y1,
        xref=xref,
        yref=yref,
        line={"color": HIGHLIGHT_COLOR, "width": HIGHLIGHT_WIDTH},
        fillcolor="rgba(0,0,0,0)",
        layer="above",
        name=name,
    )
    return fig


def highlight_row(fig: go.Figure, row: int, n_cols: int, *, xref: str = "x", yref: str = "y") -> go.Figure:
    """Frame row ``row`` (a query) of a heatmap ``n_cols`` columns wide."""
    return _frame(fig, -0.5, n_cols - 0.5, row - 0.5, row + 0.5, xref, yref, f"tour_row_{row}")


def highlight_rows(
    fig: go.Figure, rows: Collection[int], n_cols: int, *, xref: str = "x", yref: str = "y"
) -> go.Figure:
    """Frame rows ``rows``: one frame round each run of adjacent rows (twenty leaking rows are one block, read
    through its frame, not twenty frames over the cells), named ``tour_rows_<first>_<last>``."""
    ordered = sorted(set(rows))
    runs: list[list[int]] = []
    for row in ordered:
        if runs and row == runs[-1][1] + 1:
            runs[-1][1] = row
        else:
            runs.append([row, row])
    for first, last in runs:
        _frame(fig, -0.5, n_cols - 0.5, first - 0.5, last + 0.5, xref, yref, f"tour_rows_{first}_{last}")
    return fig


def highlight_column(fig: go.Figure, col: int, n_rows: int, *, xref: str = "x", yref: str = "y") -> go.Figure:
    """Frame column ``col`` (a key) of a heatmap ``n_rows`` rows tall."""
    return _frame(fig, col - 0.5, col + 0.5, -0.5, n_rows - 0.5, xref, yref, f"tour_column_{col}")


def highlight_cell(fig: go.Figure, row: int, col: int, *, xref: str = "x", yref: str = "y") -> go.Figure:
    """Frame one cell: query ``row``, key ``col`` (a head in a layer x head grid: row = layer, col = head)."""
    return _frame(fig, col - 0.5, col + 0.5, row - 0.5, row + 0.5, xref, yref, f"tour_cell_{row}_{col}")


def highlight_box(
    fig: go.Figure, x0: float, x1: float, y0: float, y1: float, *, xref: str = "x", yref: str = "y"
) -> go.Figure:
    """Frame any rectangle, in data coordinates (a block of cells, a group of heads)."""
    return _frame(fig, x0, x1, y0, y1, xref, yref, "tour_box")


def highlight_traces(fig: go.Figure, names: Collection[str]) -> go.Figure:
    """Dim every trace whose name is not in ``names``: the curves the step talks about stay as the page drew
    them. ValueError when no trace has one of the names (a mark on nothing is a bug, not a quiet figure)."""
    names = set(names)
    if not names & {trace.name for trace in fig.data}:
        raise ValueError(f"no trace named {sorted(names)}: the figure has {[trace.name for trace in fig.data]}")
    for trace in fig.data:
        if trace.name not in names:
            trace.opacity = DIMMED_OPACITY
    return fig


def mark_x(fig: go.Figure, x: float, label: str = "", *, row: int | None = None, col: int | None = None) -> go.Figure:
    """A vertical line at ``x`` (a setting's value on a curve's axis), labelled at its top; ``row``/``col`` pick a
    subplot's axes in a figure made with subplots. The label is the caller's words, already escaped where it
    holds user text (Plotly reads annotation text as HTML)."""
    where = {"row": row, "col": col} if row is not None else {}
    fig.add_vline(
        x=x,
        line={"color": HIGHLIGHT_COLOR, "width": HIGHLIGHT_WIDTH, "dash": "dot"},
        annotation_text=label,
        annotation_position="top",
        annotation_font_color=HIGHLIGHT_COLOR,
        **where,
    )
    return fig


def make_heads_sweep_figure(
    table: pd.DataFrame, *, names: Mapping[str, str], threshold: float, title: str = ""
) -> go.Figure:
    """The tour's heads sweep (no page draws it; :func:`attnviz.labs.tour.heads_sweep.HeadsSweep.table`): the
    held-out loss (left axis) and how alike the heads attend (right axis: the mean and the smallest JS distance
    between two heads, ``threshold`` dashed), over the number of heads. ``names``: the words for keys "loss",
    "mean", "closest", "threshold", "heads", "distance" (the caller's, in the reader's language)."""
    x = table["n_head"].tolist()
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    loss_line = {"color": LOSS_COLOR}
    fig.add_trace(
        go.Scatter(x=x, y=table["loss"], name=names["loss"], mode="lines+markers", line=loss_line), secondary_y=False
    )
    for column, dash in (("mean_distance", "solid"), ("closest", "dot")):
        name = names["mean" if column == "mean_distance" else "closest"]
        line = {"dash": dash, "color": DISTANCE_COLOR}
        fig.add_trace(go.Scatter(x=x, y=table[column], name=name, mode="lines+markers", line=line), secondary_y=True)
    fig.add_trace(
        go.Scatter(
            x=[x[0], x[-1]],
            y=[threshold, threshold],
            name=names["threshold"],
            mode="lines",
            line={"dash": "dash", "color": "grey"},
        ),
        secondary_y=True,
    )
    fig.update_xaxes(title_text=names["heads"], tickvals=x)
    fig.update_yaxes(title_text=names["loss"], rangemode="tozero", color=LOSS_COLOR, secondary_y=False)
    distance_axis = {"range": [0, 1], "tickmode": "linear", "dtick": 0.2, "showgrid": False}
    fig.update_yaxes(title_text=names["distance"], color=DISTANCE_COLOR, **distance_axis, secondary_y=True)
    fig.update_layout(title=title, legend={"orientation": "h", "y": -0.25}, height=420)
    return fig


__all__ = [
    "DIMMED_OPACITY",
    "HIGHLIGHT_COLOR",
    "highlight_box",
    "highlight_cell",
    "highlight_column",
    "highlight_row",
    "highlight_rows",
    "highlight_traces",
    "make_heads_sweep_figure",
    "mark_x",
]

"""The layer x head grid drawn by the page's own canvas (a Components v2 component: no iframe, no Plotly).

The grid is the Heads page's first map, and a new visitor's first sight of attnviz. Drawn by Plotly it waited
for Streamlit's 4.7 MB Plotly chunk (downloaded, then about a second of the browser's work) and was laid out
twice; here it is a palette PNG (:mod:`attnviz.figures.grid_picture`) that a ``<canvas>`` draws as it arrives,
with the same hover text and click (a click on a tile sends ``[layer, head]`` back: :func:`grid_canvas` returns
it once, on the run that click starts). Its Export menu keeps the Plotly figure, built on the click, as HTML.
A session's first map holds the page's Plotly charts back until it is drawn (:func:`charts_after_map`).
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from attnviz.app import exports
from attnviz.figures.grid_picture import grid_picture
from attnviz.figures.heads import HeadGrid, head_grid_figure
from attnviz.i18n.translate import t
from attnviz.models.record import Head

_HERE = Path(__file__).with_name("components")
_GRID = st.components.v2.component(
    "attnviz_head_grid",
    js=(_HERE / "head_grid.js").read_text(encoding="utf-8"),
    css=(_HERE / "head_grid.css").read_text(encoding="utf-8"),
)


def clicked_tile(value) -> tuple[int, Head] | None:
    """The (layer, head) a click on the canvas sent (``[layer, head]``), or None for anything else."""
    try:
        layer, head = value
        return int(layer), head if head == "mean" else int(head)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class GridEvents:
    """What the grid's canvas said on this run: the tile a click opened (None: no click), and whether the page's
    charts wait for the session's first map (:func:`charts_after_map`)."""

    tile: tuple[int, Head] | None
    charts_wait: bool


def grid_canvas(grid: HeadGrid, key: str) -> GridEvents:
    """Draw ``grid`` under ``key``, with an Export menu (the grid as interactive HTML); what its canvas said.

    A session's first map holds the page's Plotly charts back until the browser has drawn it: on this machine the
    browser would otherwise evaluate Plotly's 4.7 MB bundle (a second or more of its only thread) between the
    map's arrival and its drawing, and a new visitor would wait for Plotly after all. The canvas reports its first
    drawing (the trigger ``drawn``), which reruns the page, now with its charts; until then :func:`charts_after_map`
    puts a line where each chart goes. A session without a browser (AppTest, a script) waits for nothing, and
    neither does any on a server that does not hold Plotly back for the map: only ``serve.py``'s page does
    (:func:`wait_for_first_map`, called by its warm-up; ``streamlit run app.py`` asks for Plotly as Streamlit does)."""
    drawn_before = bool(st.session_state.get(_MAP_DRAWN))
    waits = _WAIT_FOR_MAP and not drawn_before and _in_a_browser()
    picture = grid_picture(grid, label=t("heads.grid"), hint=t("grid_canvas.hint"))
    with st.container():
        result = _GRID(
            data={**picture, "report_drawn": waits}, key=key, on_tile_change=_ignore, on_drawn_change=_ignore
        )
        with st.popover(t("exports.menu"), icon=":material/download:"):
            st.download_button(
                t("exports.html"),
                data=functools.partial(_figure_html, grid, key),
                file_name=f"{exports.file_stem(key)}.html",
                mime="text/html",
                key=f"{key}_html",
                on_click="ignore",
                help=t("exports.html_help"),
            )
    if getattr(result, "drawn", None):
        st.session_state[_MAP_DRAWN] = True
        waits = False
    st.session_state[_REPORT_DUE] = waits
    return GridEvents(clicked_tile(getattr(result, "tile", None)), waits)


def wait_for_first_map(wait: bool = True) -> None:
    """Make a browser's first map hold the page's Plotly charts back until it is drawn, in this process: what
    ``serve.py``'s page needs, whose script fetches Plotly only once that map is drawn
    (:mod:`attnviz.app.static_assets`); there the rerun that brings the charts finds Plotly loading already."""
    global _WAIT_FOR_MAP
    _WAIT_FOR_MAP = wait


def map_report_due() -> bool:
    """Whether this session's last run waits for its first map's drawing: then the run it starts is the app's own,
    which should keep what the session's first run said (attnviz.app.replica's note)."""
    return bool(st.session_state.get(_REPORT_DUE))


_WAIT_FOR_MAP = False  # whether a browser's first map holds the page's charts back (serve.py's page: see below)
_MAP_DRAWN = "_grid_canvas_drawn"  # this session's browser has drawn a canvas map
_REPORT_DUE = "_grid_canvas_report_due"  # the last run asked the canvas to say when it has drawn
_CHARTS_WAIT: contextvars.ContextVar[bool] = contextvars.ContextVar("charts_wait", default=False)


@contextmanager
def charts_after_map(wait: bool) -> Iterator[None]:
    """Within this block, while ``wait`` (:attr:`GridEvents.charts_wait`), :func:`attnviz.app.widgets.plotly` puts a
    line where each chart goes, instead of the chart (a script run is one thread: the flag is this run's)."""
    token = _CHARTS_WAIT.set(wait)
    try:
        yield
    finally:
        _CHARTS_WAIT.reset(token)


def charts_wait() -> bool:
    """Whether this run's charts wait for the session's first map (see :func:`charts_after_map`)."""
    return _CHARTS_WAIT.get()


def _in_a_browser() -> bool:
    """Whether a browser runs this session (its websocket's request headers): AppTest's sessions have none."""
    return bool(st.context.headers)


def _ignore() -> None:
    """A trigger's callback: the page reads the trigger from the run it starts."""


def _figure_html(grid: HeadGrid, key: str) -> bytes:
    return exports.figure_html(head_grid_figure(grid), key)

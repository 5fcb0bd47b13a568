"""Widgets every page uses: charts and tables with an Export menu, the layer and head pickers, and errors.

Everything the library says reaches the page through here or :func:`attnviz.i18n.translate.tr`: an error
through :func:`show_error` (the reader's language, the data in it escaped), a table through :func:`table`
(its headers and any message in its cells in the reader's language).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from attnviz.app import exports
from attnviz.app.grid_canvas import charts_wait
from attnviz.app.running import page_run
from attnviz.app.state import valid_choice
from attnviz.core.memory_errors import is_out_of_memory, one_line
from attnviz.core.token_display import markdown_text
from attnviz.errors import AttnvizBugError
from attnviz.figures.base import head_label, upright_axis_titles
from attnviz.i18n.message import Text, msg
from attnviz.i18n.translate import t, tr
from attnviz.models.record import Head

log = logging.getLogger(__name__)


def show_error(error) -> None:
    """An error box for an exception, a message or text: in the reader's language, every piece of data in it (a
    path, a file name, a model's name, a foreign library's own words) escaped, so it is shown, never read as
    Markdown."""
    st.error(tr(error, escape=markdown_text))


def run_page(page) -> None:
    """Run the chosen page; out of memory anywhere in it (a capture, generation, ablation, a KV measurement) is
    one line in the page, the device's cached blocks handed back, and the server goes on. A bug of attnviz's
    met in a model's pass (:class:`AttnvizBugError`) is one line saying so, its traceback in the server log.
    Anything else is Streamlit's to show, as before. While it runs, a run over a second says that work is running
    and what, and the previous run's results still on the screen are hidden (:func:`attnviz.app.running.page_run`)."""
    with page_run():
        try:
            page.run()
        except (MemoryError, RuntimeError) as err:
            if not is_out_of_memory(err):
                raise
            show_error(one_line(err, _session_device()))
        except AttnvizBugError as err:
            show_bug(err)


def show_bug(err: AttnvizBugError) -> None:
    """attnviz's own bug: its traceback (the original error's, chained) to the server log, one line to the reader."""
    log.error("%s", err, exc_info=err)
    show_error(msg("model_errors.bug_in_log", bug=err))


def _session_device() -> str | None:
    settings = st.session_state.get("settings")
    spec = getattr(settings, "spec", None)
    return getattr(spec, "device", None)


def show_info(message) -> None:
    """An info box for something the page cannot do with this model or text (escaped as :func:`show_error`)."""
    st.info(tr(message, escape=markdown_text))


def layer_head_picker(n_layer: int, n_head: int, key: str, with_mean: bool = True) -> tuple[int, Head]:
    """Two selectboxes side by side: a layer and a head (or "mean")."""
    cols = st.columns(2)
    heads = [*range(n_head), "mean"] if with_mean else list(range(n_head))
    valid_choice(f"{key}_layer", range(n_layer), 0)  # L29 of SmolLM2 is no layer of MiniLM's six
    valid_choice(f"{key}_head", heads, 0)
    # the labels are made in this run, in the session's language; format_func only looks them up
    names = {h: head_label(h) for h in heads}
    layer = cols[0].selectbox(t("views.layer"), range(n_layer), key=f"{key}_layer", format_func=lambda i: f"L{i}")
    head = cols[1].selectbox(t("views.head"), heads, key=f"{key}_head", format_func=names.get)
    return layer, head


def tab_picker(tabs: list[str], key: str) -> str:
    """A page's tabs (``tabs``: their labels' catalogue keys) as a horizontal choice; returns the open one's key.
    ``st.tabs`` runs every tab's code on every rerun, hidden or not: the page runs only the open tab's."""
    valid_choice(key, tabs, tabs[0])
    names = {tab: t(tab) for tab in tabs}  # made in this run, in the session's language
    return st.radio(t("tabs.show"), tabs, horizontal=True, key=key, format_func=names.get, label_visibility="collapsed")


def plotly(fig: go.Figure, key: str, *, tensors=None, **kwargs):
    """Render a figure at full width with a stable key, an Export menu under it; returns the selection event when
    asked for one.

    A figure that sets its own width (a heatmap of tokens, built to fill the width its page or column gives:
    :func:`attnviz.figures.base.fit_token_axes`) is drawn that wide, or as wide as the column in a narrower window,
    its cells kept square; any other fills the column. While the session's first map is not drawn
    (:func:`attnviz.app.grid_canvas.charts_after_map`) a line stands where the chart goes. The modebar's camera saves an SVG at the figure's size,
    named after ``key`` (the menu switches it to PNG);
    the menu also offers the figure as offline HTML and, given ``tensors`` (an
    :class:`attnviz.app.exports.TensorExport`), the tensors it draws. Chart and menu share a container, so a
    placeholder (``st.empty``) holding the chart holds both.
    """
    if charts_wait():  # the session's first map is not drawn yet: the chart comes on the run it starts
        st.caption(t("grid_canvas.chart_follows"))
        return None
    fig = upright_axis_titles(fig)  # Chinese axis titles written across, not laid on their side
    fmt = st.session_state.get(f"{key}_image_format")
    config = exports.chart_config(fig, key, fmt if fmt in exports.IMAGE_FORMATS else "svg")
    width = "content" if fig.layout.width else "stretch"  # a figure sized to its plot keeps that size where it fits
    with st.container():
        event = st.plotly_chart(fig, key=key, width=width, config=config, **kwargs)
        export_menu(key, fig=fig, tensors=tensors)
    return event


def export_menu(
    key: str, *, fig: go.Figure | None = None, table: pd.DataFrame | None = None, tensors=None, label: str | None = None
) -> None:
    """One small "Export" popover: the camera's format and offline HTML for ``fig``, CSV for ``table``, and
    safetensors / npz for ``tensors`` (an :class:`attnviz.app.exports.TensorExport`).

    Every file is built on the click (``st.download_button(data=callable)``): an HTML file inlines plotly.js
    (~4.6 MB), which no rerun should pay for. A tensor export over the bound says so instead of offering a button.
    """
    stem = exports.file_stem(key)
    with st.popover(label or t("exports.menu"), icon=":material/download:"):
        if fig is not None:
            st.segmented_control(
                t("exports.camera"),
                exports.IMAGE_FORMATS,
                default="svg",
                required=True,
                format_func=str.upper,
                key=f"{key}_image_format",
                help=t("exports.camera_help"),
            )
            st.download_button(
                t("exports.html"),
                data=functools.partial(exports.figure_html, fig, key),
                file_name=f"{stem}.html",
                mime="text/html",
                key=f"{key}_html",
                on_click="ignore",
                help=t("exports.html_help"),
            )
        if table is not None:
            st.download_button(
                t("exports.csv"),
                data=functools.partial(exports.table_csv, table),
                file_name=f"{stem}.csv",
                mime="text/csv",
                key=f"{key}_csv",
                on_click="ignore",
            )
        if tensors is not None:
            if tensors.too_large:
                st.caption(
                    t(
                        "exports.too_large",
                        size=f"{tensors.nbytes / 2**20:,.1f}",
                        limit=f"{exports.TENSOR_EXPORT_MAX_BYTES / 2**20:,.0f}",
                    )
                )
                return
            for fmt, mime in exports.TENSOR_FORMATS.items():
                st.download_button(
                    t("exports.tensors", format=fmt),
                    data=functools.partial(exports.tensor_file, tensors, fmt),
                    file_name=f"{stem}.{fmt}",
                    mime=mime,
                    key=f"{key}_{fmt}",
                    on_click="ignore",
                )


def in_words(df: pd.DataFrame, headers: Mapping[str, str | Text] | None = None) -> pd.DataFrame:
    """A library table as the reader sees it: every message in a cell in the reader's language, and each column
    named in ``headers`` ({column: catalogue key or message}) renamed to its header."""
    shown = df.copy()
    for column in shown.columns:
        if shown[column].dtype == "object" and shown[column].map(lambda cell: isinstance(cell, Text)).any():
            shown[column] = shown[column].map(lambda cell: tr(cell) if isinstance(cell, Text) else cell)
    if headers:
        shown = shown.rename(columns={c: t(h) if isinstance(h, str) else tr(h) for c, h in headers.items()})
    return shown


def table(df: pd.DataFrame, key: str, *, tensors=None, headers: Mapping[str, str | Text] | None = None, **kwargs):
    """``st.dataframe`` with an Export menu under it: the table as CSV (and ``tensors``, if given). The table is
    shown, and exported, in the reader's words (:func:`in_words`)."""
    shown = in_words(df if isinstance(df, pd.DataFrame) else pd.DataFrame(df), headers)
    event = st.dataframe(shown, key=key, **kwargs)
    export_menu(key, table=shown, tensors=tensors)
    return event

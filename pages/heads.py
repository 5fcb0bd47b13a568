"""Heads: the layer x head grid, one head drawn large (pooled with a full-resolution zoom on long texts), statistics.

The grid is the navigation: a click on a tile opens that head in the large view, and
the open head is kept in the link (``?layer=3&head=5``) so a shared link opens it too.
"""

import streamlit as st

from attnviz.app import exports
from attnviz.app.grid_canvas import charts_after_map, grid_canvas
from attnviz.app.head_view import head_view, show_token, value_switch
from attnviz.app.links import keep_layer_head_in_link, link_layer_head
from attnviz.app.loading import current_source, kind_picker, kind_record
from attnviz.app.navigation import frame_settings
from attnviz.app.search import new_focus, token_search
from attnviz.app.weights_note import random_weights_note
from attnviz.app.widgets import export_menu, layer_head_picker, plotly
from attnviz.core.token_display import markdown_text
from attnviz.figures.base import HEATMAP_SIDE_PX, PAGE_WIDTH_PX, column_width, head_label
from attnviz.figures.heads import (
    SQRT_BY_ITSELF_TOKENS,
    flag_names,
    grid_show_labels,
    grid_show_options,
    grid_view,
    selected_tile,
)
from attnviz.figures.lines import MAX_POINTS, fits, most_tokens
from attnviz.i18n.translate import language, t, tr
from pages.widgets.heads import alignment_section, grid_of, lines, lines_figure, stats_section

TALL_GRID_LAYERS = 12  # above this many layers the grid is compact and the large view sits beside it
BESIDE_GRID_SIDE = 480  # pixels a side of the large view beside the grid, at most
BESIDE_GRID_WIDTH = column_width((2, 3), 1, gap_px=32)  # the width of its column: labels and colour bar included


def open_head(layer: int, head: int | str) -> None:
    st.session_state["heads_layer"], st.session_state["heads_head"] = layer, head


def heat_map_grid(record, key: tuple, gamma: float, tall: bool):
    """The layer x head grid of heat maps, with what to show; the areas for the grid and the large view (side by
    side for a tall model: the compact grid beside the large view), and whether the page's charts wait for the
    session's first map (:func:`attnviz.app.grid_canvas.charts_after_map`)."""
    b = record.bin_size
    st.caption(t("heads.grid_caption") + (t("heads.grid_pooled", b=b) if b > 1 else ""))
    cols = st.columns(2)
    options = grid_show_options(record.stat_columns)
    show = cols[0].selectbox(t("heads.show"), options, key="heads_grid_show", format_func=grid_show_labels(options).get)
    if tall:  # beside the large view, half the width: always compact, or its tiles leave a tall empty band
        compact = True
        cols[1].caption(t("heads.tall", n_layer=record.n_layer))
    else:
        compact = cols[1].toggle(t("heads.compact"), key="heads_compact")
    # the compact grid is narrow (a few hundred pixels for 10 heads); the large view beside it gets the wider share
    grid_area, view_area = st.columns([2, 3], gap="medium") if tall else (st.container(), st.container())
    with grid_area:
        events = grid_canvas(grid_of(key, gamma, record, show, compact), key="heads_grid")
        tile = events.tile
        if tile is not None and tile[0] < record.n_layer and (tile[1] == "mean" or tile[1] < record.n_head):
            open_head(*tile)  # before the large view below reads the layer and head pickers
        if (shown := grid_view(record.statistics, record.n_layer, record.n_head, show)["shown"]) is not None:
            names = ", ".join(f"L{layer} {head_label(int(head))}" for layer, head in zip(*shown.nonzero(), strict=True))
            flag = flag_names(show.removeprefix("only heads flagged "))
            st.caption(
                t("heads.flagged", n=int(shown.sum()), total=shown.size, flag=flag, names=names or t("heads.none"))
            )
    return grid_area, view_area, events.charts_wait


st.title(t("heads.title"))
settings = frame_settings()
source = current_source(settings)
if source is None:
    st.stop()
kind = kind_picker(source, "heads_kind")  # an encoder-decoder: its encoder, its decoder, or cross-attention
record = kind_record(settings, source, kind)
if record is None:
    st.stop()
if kind is not None:
    st.caption(t(f"heads.kind_{kind}_caption", n_query=record.q_len, n_key=record.k_len))

st.caption(
    t(
        "heads.model_caption",
        model=markdown_text(record.model_name),
        n_tokens=len(record.tokens),
        n_layer=record.n_layer,
        n_head=record.n_head,
        n_kv_head=record.n_kv_head,
        mask=tr(record.mask_summary()),
        implementation=record.implementation,
    )
)
if record.random_weights:
    st.info(t("heads.random_weights"))
if record.has_sinks:
    st.caption(t("heads.sinks"))

link_layer_head("heads", range(record.n_layer), [*range(record.n_head), "mean"])  # a link opens its head once
for chart in ("heads_lines",):  # a query of the lines view (a tile of the grid opens below, where it is drawn)
    tile = selected_tile(st.session_state.get(chart))
    if tile is not None and tile != st.session_state.get(f"{chart}_opened"):  # a new click opens its head once
        st.session_state[f"{chart}_opened"] = tile
        if tile[0] < record.n_layer and (tile[1] == "mean" or tile[1] < record.n_head):
            open_head(*tile)

# past a hundred-odd tokens most weights are tiny and a linear scale draws a dark square: √ is on by itself there
long_input = max(record.q_len, record.k_len) > SQRT_BY_ITSELF_TOKENS  # a cross record: its longer side
emphasise = st.toggle(
    t("heads.emphasise"),
    value=long_input,
    key="heads_sqrt_long" if long_input else "heads_sqrt",  # one setting for short texts, one for long ones
)
gamma = 0.5 if emphasise else 1.0
if long_input:
    st.caption(t("heads.sqrt_on" if emphasise else "heads.sqrt_off", q_len=max(record.q_len, record.k_len)))
key = (
    (
        *settings.key(),
        kind,
        st.session_state.get("target"),
        st.session_state.get("target_from"),
        st.session_state.get("n_generate"),
    )
    if kind
    else settings.key()
)
tall = record.n_layer > TALL_GRID_LAYERS

st.subheader(t("heads.grid"))
styles = {"maps": t("heads.grid_style_maps"), "lines": t("heads.grid_style_lines")}
style = st.radio(t("heads.grid_style"), list(styles), format_func=styles.get, key="heads_grid_style", horizontal=True)
as_lines = style == "lines" and fits(max(record.q_len, record.k_len), record.n_layer, record.n_head)
if as_lines:  # in place of the heat maps: every head on one screen, the large view below it
    drawn_lines = lines(record)
    st.caption(
        t(
            "heads.lines_caption",
            threshold=drawn_lines.threshold,
            n_drawn=drawn_lines.n_drawn,
            n_visible=drawn_lines.n_visible,
        )
    )
    plotly(
        lines_figure(key, record, drawn_lines, language()),
        key="heads_lines",
        on_select="rerun",
        selection_mode=("points",),
    )
elif style == "lines":
    most = most_tokens(record.n_layer, record.n_head)
    dims = {"n_layer": record.n_layer, "n_head": record.n_head}
    st.info(
        t("heads.lines_too_long", most=most, n=record.q_len, **dims)
        if most
        else t("heads.lines_too_many_heads", points=MAX_POINTS, **dims)
    )
if not as_lines:
    grid_area, view_area, charts_wait = heat_map_grid(record, key, gamma, tall)
else:
    grid_area, view_area, charts_wait = st.container(), st.container(), False

with charts_after_map(charts_wait), view_area:
    st.subheader(t("heads.large"))
    layer, head = layer_head_picker(record.n_layer, record.n_head, key="heads")
    keep_layer_head_in_link(layer, head)
    token_search(record.tokens, key="heads_search")
    if (token := new_focus("heads")) is not None:  # a picked occurrence moves the window and the row to it
        show_token(record, "heads", token)
    values = value_switch(record, key="heads_values")
    if values and not record.full_view:
        st.caption(t("value_weighted.pooled_raw"))
    beside = tall and not as_lines  # the large view beside the compact grid of heat maps
    side, width = (BESIDE_GRID_SIDE, BESIDE_GRID_WIDTH) if beside else (HEATMAP_SIDE_PX[1], PAGE_WIDTH_PX)
    drawn = head_view(record, layer, head, key="heads", gamma=gamma, max_side=side, max_width=width, values=values)
    export_menu(  # the head as drawn: the window at full resolution, and the pooled map above it on a long text
        "heads_head_export",
        tensors=exports.head_export(record, layer, head, drawn.rows, drawn.cols, pooled=drawn.pooled),
        label=t("exports.menu_head"),
    )

with charts_after_map(charts_wait):
    if record.cross:
        random_weights_note(source)  # a random model's "most monotonic" head is noise (attnviz.app.weights_note)
        alignment_section(record, key)

    st.subheader(t("heads.stats"))
    stats_section(record, key, key="heads")
    export_menu(
        "heads_stats_export",
        table=record.statistics,
        tensors=exports.statistics_export(record),
        label=t("exports.menu_stats"),
    )

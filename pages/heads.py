"""Heads: the layer x head grid, one head drawn large (pooled with a full-resolution zoom on long texts), statistics.

The grid is the navigation: a click on a tile opens that head in the large view, and
the open head is kept in the link (``?layer=3&head=5``) so a shared link opens it too.
"""

import streamlit as st

from attnviz import ui
from attnviz.figures import grid_show_options, grid_view, selected_tile
from attnviz.head_stats import STAT_COLUMNS
from attnviz.record import head_label
from attnviz.token_display import markdown_text

SQRT_BY_ITSELF_TOKENS = 128  # longer inputs are coloured by √weight unless the user turns it off
TALL_GRID_LAYERS = 12  # above this many layers the grid is compact and the large view sits beside it


def head_from_link(n_layer: int, n_head: int) -> tuple[int, int | str] | None:
    """The (layer, head) that the page's query parameters ask for, or None (with a caption) when they make no sense."""
    layer, head = st.query_params.get("layer"), st.query_params.get("head")
    if layer is None and head is None:
        return None
    try:
        picked = int(layer or 0), "mean" if head == "mean" else int(head or 0)
    except ValueError:
        picked = None
    if picked is None or not 0 <= picked[0] < n_layer or (picked[1] != "mean" and not 0 <= picked[1] < n_head):
        shown = markdown_text(f"layer={layer} head={head}"[:80])
        st.caption(f"The link's head ({shown}) is not one of {n_layer} layers × {n_head} heads: ignored.")
        return None
    return picked


def open_head(layer: int, head: int | str) -> None:
    st.session_state["heads_layer"], st.session_state["heads_head"] = layer, head


st.title("Heads")
settings = ui.frame_settings()
record = ui.current_record(settings)
if record is None:
    st.stop()

st.caption(
    f"**{markdown_text(record.model_name)}**: {len(record.tokens):,} tokens, {record.n_layer} layers × {record.n_head} heads "
    f"({record.n_kv_head} key/value heads), mask: {record.mask_summary()}. Weights from `{record.implementation}`."
)
if record.random_weights:
    st.info("The embedded model's weights are random: its patterns show the mechanics of attention, not language.")

if "heads_link_read" not in st.session_state:  # a link opens its head once; later the widgets lead
    st.session_state["heads_link_read"] = True
    if (linked := head_from_link(record.n_layer, record.n_head)) is not None:
        open_head(*linked)
tile = selected_tile(st.session_state.get("heads_grid"))
if tile is not None and tile != st.session_state.get("heads_grid_opened"):  # a new click opens its head once
    st.session_state["heads_grid_opened"] = tile
    if tile[0] < record.n_layer and (tile[1] == "mean" or tile[1] < record.n_head):
        open_head(*tile)

# past a hundred-odd tokens most weights are tiny and a linear scale draws a dark square: √ is on by itself there
long_input = record.q_len > SQRT_BY_ITSELF_TOKENS
emphasise = st.toggle(
    "Emphasise small weights (colour by √weight)",
    value=long_input,
    key="heads_sqrt_long" if long_input else "heads_sqrt",  # one setting for short texts, one for long ones
)
gamma = 0.5 if emphasise else 1.0
if long_input:
    st.caption(
        f"{record.q_len:,} tokens: weights are small, so the colour follows √weight unless you turn it off "
        f"({'on' if emphasise else 'off'} now)."
    )
key = settings.key()
tall = record.n_layer > TALL_GRID_LAYERS

st.subheader("Layer × head grid")
b = record.bin_size
st.caption(
    "Each tile is one head (rows: query, columns: key), max-pooled so that thin patterns such as a previous-token "
    "diagonal stay visible; the last column is the mean over heads; grey cells are masked. Hover a tile for its "
    "flags, click it to open it large." + (f" Drawn from maps pooled over {b} × {b} tokens." if b > 1 else "")
)
cols = st.columns(2)
show = cols[0].selectbox("Show", grid_show_options(STAT_COLUMNS), key="heads_grid_show")
if tall:  # beside the large view, half the width: always compact, or its tiles leave a tall empty band
    compact = True
    cols[1].caption(f"{record.n_layer} layers: the grid is compact and the large view sits beside it.")
else:
    compact = cols[1].toggle("Compact grid (fits about 900 px)", key="heads_compact")
grid_area, view_area = st.columns(2, gap="medium") if tall else (st.container(), st.container())
with grid_area:
    ui.plotly(
        ui.grid_figure(key, gamma, record, show, compact),
        key="heads_grid",
        on_select="rerun",
        selection_mode=("points",),
    )
    if (shown := grid_view(record.statistics, record.n_layer, record.n_head, show)["shown"]) is not None:
        names = ", ".join(f"L{layer} {head_label(int(head))}" for layer, head in zip(*shown.nonzero(), strict=True))
        st.caption(
            f"{int(shown.sum())} of {shown.size} heads are {show.removeprefix('only heads ')}: {names or 'none'}."
        )

with view_area:
    st.subheader("One head, large")
    layer, head = ui.layer_head_picker(record.n_layer, record.n_head, key="heads")
    if st.query_params.get("layer") != str(layer) or st.query_params.get("head") != str(head):
        st.query_params.update(layer=str(layer), head=str(head))
    ui.head_view(record, layer, head, key="heads", gamma=gamma)

st.subheader("Per-head statistics")
ui.stats_section(record, key, key="heads")

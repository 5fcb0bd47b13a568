"""Heads: the layer x head grid, one head drawn large (pooled with a full-resolution zoom on long texts), statistics.

The grid is the navigation: a click on a tile opens that head in the large view, and
the open head is kept in the link (``?layer=3&head=5``) so a shared link opens it too.
"""

import streamlit as st

from attnviz import exports, ui
from attnviz.figures import grid_show_labels, grid_show_options, grid_view, selected_tile
from attnviz.head_stats import STAT_COLUMNS
from attnviz.i18n import t
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
        st.caption(t("heads.bad_link", shown=shown, n_layer=n_layer, n_head=n_head))
        return None
    return picked


def open_head(layer: int, head: int | str) -> None:
    st.session_state["heads_layer"], st.session_state["heads_head"] = layer, head


st.title(t("heads.title"))
settings = ui.frame_settings()
record = ui.current_record(settings)
if record is None:
    st.stop()

st.caption(
    t(
        "heads.model_caption",
        model=markdown_text(record.model_name),
        n_tokens=len(record.tokens),
        n_layer=record.n_layer,
        n_head=record.n_head,
        n_kv_head=record.n_kv_head,
        mask=record.mask_summary(),
        implementation=record.implementation,
    )
)
if record.random_weights:
    st.info(t("heads.random_weights"))

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
    t("heads.emphasise"),
    value=long_input,
    key="heads_sqrt_long" if long_input else "heads_sqrt",  # one setting for short texts, one for long ones
)
gamma = 0.5 if emphasise else 1.0
if long_input:
    st.caption(t("heads.sqrt_on" if emphasise else "heads.sqrt_off", q_len=record.q_len))
key = settings.key()
tall = record.n_layer > TALL_GRID_LAYERS

st.subheader(t("heads.grid"))
b = record.bin_size
st.caption(t("heads.grid_caption") + (t("heads.grid_pooled", b=b) if b > 1 else ""))
cols = st.columns(2)
options = grid_show_options(STAT_COLUMNS)
show = cols[0].selectbox(t("heads.show"), options, key="heads_grid_show", format_func=grid_show_labels(options).get)
if tall:  # beside the large view, half the width: always compact, or its tiles leave a tall empty band
    compact = True
    cols[1].caption(t("heads.tall", n_layer=record.n_layer))
else:
    compact = cols[1].toggle(t("heads.compact"), key="heads_compact")
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
        flag = show.removeprefix("only heads flagged ")
        st.caption(t("heads.flagged", n=int(shown.sum()), total=shown.size, flag=flag, names=names or t("heads.none")))

with view_area:
    st.subheader(t("heads.large"))
    layer, head = ui.layer_head_picker(record.n_layer, record.n_head, key="heads")
    if st.query_params.get("layer") != str(layer) or st.query_params.get("head") != str(head):
        st.query_params.update(layer=str(layer), head=str(head))
    ui.head_view(record, layer, head, key="heads", gamma=gamma)
    if record.full_view:
        ui.export_menu(
            "heads_head_export", tensors=exports.head_export(record, layer, head), label=t("exports.menu_head")
        )
    else:  # the pooled map and the full-resolution window the view drew
        q0, k0, side = (int(st.session_state[f"heads_{name}"]) for name in ("q0", "k0", "side"))
        window = (q0, min(record.q_len, q0 + side)), (k0, min(record.k_len, k0 + side))
        pooled = record.pooled(layer, head, st.session_state["heads_pool"])
        ui.export_menu(
            "heads_head_export",
            tensors=exports.head_export(record, layer, head, *window, pooled=pooled),
            label=t("exports.menu_head"),
        )

st.subheader(t("heads.stats"))
ui.stats_section(record, key, key="heads")
ui.export_menu(
    "heads_stats_export",
    table=record.statistics,
    tensors=exports.statistics_export(record),
    label=t("exports.menu_stats"),
)

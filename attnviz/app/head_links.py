"""Heads in rank order, each a click away from its attention in the Heads page."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import streamlit as st

from attnviz.app.widgets import table
from attnviz.i18n.message import Text
from attnviz.i18n.translate import t

HEADS_PAGE = "pages/heads.py"


def open_in_heads_page(layer: int, head: int) -> None:
    """Switch to the Heads page on ``layer``.``head`` (its large view opened there), the sidebar's settings kept."""
    st.session_state["heads_layer"], st.session_state["heads_head"] = layer, head
    st.session_state["heads_link_read"] = True  # the page's own ?layer=&head= is read once: this choice wins
    query = {**st.query_params.to_dict(), "layer": str(layer), "head": str(head)}
    st.switch_page(HEADS_PAGE, query_params=query)


def ranked_heads(rows: Sequence[Sequence], key: str, columns: Sequence[str], headers: Mapping[str, str | Text]) -> None:
    """A table of heads, one a row (its first two columns the layer and the head), in the order given; clicking a
    row opens that head in the Heads page. A table's selection outlives the switch, so each click gives the
    table a new key: coming back never opens the head again."""
    generation = st.session_state.setdefault(f"{key}_generation", 0)
    st.caption(t("heads_matter.click_to_open"))
    event = table(
        pd.DataFrame(list(rows), columns=list(columns)),
        key=f"{key}_{generation}",
        headers=headers,
        hide_index=True,
        on_select="rerun",
        selection_mode="single-row",
    )
    chosen = getattr(getattr(event, "selection", None), "rows", None) or []
    if chosen:
        layer, head = rows[chosen[0]][0], rows[chosen[0]][1]
        st.session_state[f"{key}_generation"] = generation + 1
        open_in_heads_page(int(layer), int(head))

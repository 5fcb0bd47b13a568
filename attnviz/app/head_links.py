"""Heads in rank order, each a click away from its attention in the Heads page."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import streamlit as st

from attnviz.app.widgets import table
from attnviz.i18n.message import Text
from attnviz.i18n.translate import t, tr

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


def heads_text(heads) -> str:
    """Heads as a reader writes them: "3.1, 23.4"."""
    return ", ".join(f"{layer}.{head}" for layer, head in heads)


SHOWN_FLAGGED = 20  # heads listed by name in a warning; the count says how many there are


def estimate_flags(estimate) -> None:
    """The heads where an estimate (:class:`attnviz.labs.attribution.Estimate`) is known to mislead: saturated,
    cancelling, each a warning with the heads named."""
    for name in ("saturated", "cancelling"):
        heads = getattr(estimate, name)
        if heads:
            st.warning(t(f"heads_matter.{name}", heads=heads_text(heads[:SHOWN_FLAGGED]), n=len(heads)))


def agreement_note(agreement) -> None:
    """An estimate against the exact effects (:class:`attnviz.labs.agreement.Agreement`), in a sentence."""
    st.info(
        t(
            "heads_matter.agreement",
            rho=agreement.spearman,
            overlap=agreement.overlap,
            k=agreement.k,
            n=agreement.n_heads,
        )
    )


def head_check_note(check) -> None:
    """The estimate against the exact effects head by head (:class:`attnviz.labs.agreement.HeadCheck`): a caption
    when every head compared agrees within the bound, else a warning a reason with its heads named."""
    said = check.messages()
    if not check.disagree:
        st.caption(tr(said[0]))
        return
    for message in said:
        st.warning(tr(message))


def estimate_table(ranked, estimate_values, exact_values, key: str) -> None:
    """Heads in the order of ``ranked`` ((layer, head, value) rows), each with its estimate and its exact effect
    (blank where not run), to 4 significant digits, as :func:`ranked_heads` (a click opens the head)."""

    def shown(value) -> float | None:
        return None if value is None else float(f"{value:.4g}")

    rows = [
        (layer, head, shown(estimate_values[layer][head]), shown(exact_values[layer][head] if exact_values else None))
        for layer, head, _ in ranked
    ]
    headers = {
        "layer": "ablation.col_layer",
        "head": "ablation.col_head",
        "estimate": "heads_matter.col_estimate",
        "exact": "heads_matter.col_exact",
    }
    ranked_heads(rows, key, list(headers), headers)

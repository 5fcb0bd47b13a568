"""Heads in rank order, each a click away from its attention in the Heads page."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import streamlit as st

from attnviz.app.state import keep_shared_inputs
from attnviz.app.widgets import table
from attnviz.i18n.message import Text, msg
from attnviz.i18n.translate import t, tr
from attnviz.labs.heads_matter.agreement import SIZE_FACTOR, head_check

HEADS_PAGE = "pages/heads.py"


def open_in_heads_page(layer: int, head: int) -> None:
    """Switch to the Heads page on ``layer``.``head`` (its large view opened there), the sidebar's settings kept."""
    st.session_state["heads_layer"], st.session_state["heads_head"] = layer, head
    st.session_state["heads_link_read"] = True  # the page's own ?layer=&head= is read once: this choice wins
    query = {**st.query_params.to_dict(), "layer": str(layer), "head": str(head)}
    keep_shared_inputs()  # the switch would drop the sidebar's model, text and settings
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
    """The heads where an estimate (:class:`attnviz.labs.heads_matter.attribution.Estimate`) is known to mislead: saturated,
    cancelling, and (when it ran) those GradDrop flagged, each a warning with the heads named."""
    for name, heads in estimate.flags().items():
        if heads:
            key = "estimate_check.flagged_graddrop" if name == "graddrop" else f"heads_matter.{name}"
            st.warning(t(key, heads=heads_text(heads[:SHOWN_FLAGGED]), n=len(heads), factor=SIZE_FACTOR))


def agreement_note(agreement) -> None:
    """An estimate against the exact effects (:class:`attnviz.labs.heads_matter.agreement.Agreement`), in a sentence."""
    st.info(
        t(
            "heads_matter.agreement",
            rho=agreement.spearman,
            overlap=agreement.overlap,
            k=agreement.k,
            n=agreement.n_heads,
        )
    )


def head_check_note(check, report=None) -> None:
    """The estimate against the exact effects head by head (:class:`attnviz.labs.heads_matter.agreement.HeadCheck`): a caption
    when every head compared agrees within the bound, else a warning a reason with its heads named; then, given
    ``report`` (:class:`attnviz.labs.heads_matter.agreement.FlagReport`), what each flag caught, in one sentence."""
    said = check.messages()
    if not check.disagree:
        st.caption(tr(said[0]))
    else:
        for message in said:
            st.warning(tr(message))
    if report is not None:
        st.info(tr(report.message()))


def estimate_table(
    ranked,
    estimate_values,
    exact_values,
    key: str,
    *,
    measure: str | None = None,
    same_measure: bool = True,
    graddrop=None,
    caption: str | None = None,
) -> None:
    """Heads in the order of ``ranked`` ((layer, head, value) rows), each with its estimate and its exact effect
    (blank where not run), to 4 significant digits, as :func:`ranked_heads` (a click opens the head). Once exact
    values exist the rows are sorted by them (|exact|, largest first; heads not run after, in the order given) and,
    when both columns measure the same thing (``same_measure``), each head whose estimate has the wrong sign or is
    over :data:`~attnviz.labs.heads_matter.agreement.SIZE_FACTOR` off (:func:`~attnviz.labs.heads_matter.agreement.head_check`'s bound) is
    marked. ``measure``: what the columns are in (named in their headers); ``graddrop``: GradDrop's scores, a
    column of their own; ``caption``: which question the ranking answers, above it."""

    def shown(value) -> float | None:
        return None if value is None else float(f"{value:.4g}")

    def exact_of(layer: int, head: int):
        return exact_values[layer][head] if exact_values else None

    order = list(ranked)
    if exact_values:
        run = sorted(
            (row for row in order if exact_of(row[0], row[1]) is not None),
            key=lambda row: (-abs(exact_of(row[0], row[1])), row[0], row[1]),
        )
        order = run + [row for row in order if exact_of(row[0], row[1]) is None]
    marks = head_check(estimate_values, exact_values).marks() if exact_values and same_measure else {}
    mark_text = {"sign": msg("estimate_check.mark_sign"), "size": msg("estimate_check.mark_size", factor=SIZE_FACTOR)}
    rows = []
    for layer, head, _ in order:
        row = [layer, head, shown(estimate_values[layer][head])]
        if graddrop is not None:
            row.append(shown(graddrop[layer][head]))
        row.append(shown(exact_of(layer, head)))
        if exact_values and same_measure:
            row.append(mark_text[marks[(layer, head)]] if (layer, head) in marks else "")
        rows.append(tuple(row))
    headers: dict[str, str | Text] = {"layer": "ablation.col_layer", "head": "ablation.col_head"}
    if measure is None:
        headers["estimate"] = "heads_matter.col_estimate"
    else:
        headers["estimate"] = msg("estimate_check.col_estimate", measure=measure)
    if graddrop is not None:
        headers["graddrop"] = "estimate_check.col_graddrop"
    headers["exact"] = "heads_matter.col_exact" if measure is None else msg("estimate_check.col_exact", measure=measure)
    if exact_values and same_measure:
        headers["check"] = "estimate_check.col_check"
    if caption:
        st.caption(caption)
    ranked_heads(rows, key, list(headers), headers)

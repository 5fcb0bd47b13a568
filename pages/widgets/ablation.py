"""The Ablation page's own widgets: one ablation's result, its numbers, where it changed most, the top tokens."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from attnviz.app.state import valid_choice
from attnviz.app.widgets import plotly, table
from attnviz.core.token_display import markdown_text, shown_text
from attnviz.figures.ablation import make_ablation_change_figure
from attnviz.i18n.translate import t
from attnviz.labs.ablation import AblationResult


def show_result(result: AblationResult, name: str) -> None:
    """The losses and mean KL (or the hidden change), the change at each position, the positions that change most,
    and the top next tokens before and after at a position the reader picks (an LM only)."""
    cols = st.columns(3)
    if not result.logits:
        st.caption(t("ablation.encoder_note", name=markdown_text(name)))
        cols[0].metric(t("ablation.hidden_change"), f"{result.hidden_change:.5f}")
    elif result.loss_before is None:
        st.caption(t("ablation.no_loss"))
    else:
        cols[0].metric(t("ablation.loss_before"), f"{result.loss_before:.4f}")
        cols[1].metric(
            t("ablation.loss_after"), f"{result.loss_after:.4f}", f"{result.loss_after - result.loss_before:+.4f}"
        )
        cols[2].metric(t("ablation.kl_mean"), f"{result.kl_mean:.5f}")
    plotly(make_ablation_change_figure(result), key="ablation_change")
    st.subheader(t("ablation.changed_most"))
    most = pd.DataFrame(
        [(p, result.tokens[p].text, v) for p, v in result.changed_most()], columns=["position", "token", "change"]
    )
    headers = {"position": "ablation.col_position", "token": "ablation.col_token", "change": "ablation.col_change"}
    table(most, key="ablation_most", headers=headers, hide_index=True)
    if result.logits:
        last = len(result.tokens) - 1
        valid_choice("ablation_position", range(0, last + 1), last)
        at = st.number_input(t("ablation.position"), 0, last, key="ablation_position")
        headers = {"token": "ablation.col_token", "probability": "ablation.col_probability"}
        for col, side in zip(st.columns(2), ("top_before", "top_after"), strict=True):
            with col:
                st.caption(t(f"ablation.{side}"))
                top = pd.DataFrame(getattr(result, side)[at], columns=["token", "probability"])
                top["token"] = top["token"].map(lambda text: text if text.strip() else shown_text(text))  # ␣ ⏎
                table(top, key=f"ablation_{side}", headers=headers, hide_index=True)

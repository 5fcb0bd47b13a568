"""What a page says beside results that would otherwise read as meaning (rankings, roles, alignments, patching
effects, a generation) when the model's weights look random, and what a greedy generation wrote when it wrote no
text: the one place pages turn :mod:`attnviz.models.weights_check` into words."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from attnviz.core.token_display import markdown_text, shown_text
from attnviz.i18n.translate import t, tr
from attnviz.models import weights_check


def random_weights_note(source) -> bool:
    """Say beside a page's results that ``source``'s weights look random, with the numbers of its check (measured
    once per loaded model, on the first page that asks); True when it was said. The embedded model, random by
    construction, gets an info box; a checkpoint measured as random a warning."""
    with st.spinner(t("weights_check.measuring")):
        check = weights_check.weights_check(source)
    if not check.looks_random:
        return False
    (st.info if check.basis == "declared" else st.warning)(tr(check.note))
    return True


def generation_note(ids: Sequence[int], text: str, token: str) -> bool:
    """Name a greedy generation that wrote no text (only special tokens) or one token over and over, instead of an
    empty or repetitive line read as an answer: ``ids`` the tokens written, ``text`` their decoding, ``token`` the
    first one's text. True when it was named."""
    note = weights_check.generation_note(ids, text, shown_text(token))
    if note is None:
        return False
    st.warning(tr(note, escape=markdown_text))
    return True

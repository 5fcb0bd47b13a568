"""The Mask lab's own widgets: a mask built from a kind and its settings, or the user's own, uploaded or clicked."""

from __future__ import annotations

import pandas as pd
import streamlit as st
import torch

from attnviz import settings
from attnviz.app.widgets import show_error
from attnviz.core.token_display import markdown_text
from attnviz.errors import MaskFileError
from attnviz.i18n.message import msg
from attnviz.i18n.translate import t, tr
from attnviz.labs.masks.builder import ALIGNS, LabMask, built_mask, custom_mask, kind_label
from attnviz.labs.masks.builder import KINDS as MASK_KINDS
from attnviz.labs.masks.doctor import parse_lengths
from attnviz.labs.masks.reading import MASK_SUFFIXES, infer_convention, read_mask_bytes


def lab_mask_input(labels: list[str], causal: bool) -> LabMask:
    """The Mask lab's mask: a kind and its settings, or the user's own; stops the page until there is a valid one."""
    T = len(labels)
    kind = st.selectbox(t("mask_ui.mask"), list(MASK_KINDS), format_func=lambda k: tr(kind_label(k)), key="mask_kind")
    try:
        if kind == "custom":
            lab = custom_mask_input(labels, causal)
            if lab is None:
                st.stop()
            return lab
        cols = st.columns(3)
        options = {}
        if kind in ("padding", "causal+padding"):
            options["pads"] = cols[0].number_input(t("mask_ui.pads"), 1, T - 1, min(4, T - 1), key="mask_pads")
            options["side"] = cols[1].radio(
                t("mask_ui.side"),
                ["right", "left"],
                format_func=lambda side: t(f"mask_ui.side_{side}"),
                horizontal=True,
                key="mask_side",
            )
            cols[2].caption(t("mask_ui.pads_caption"))
        elif kind == "sliding":
            options["window"] = cols[0].number_input(t("mask_ui.window"), 1, T, min(4, T), key="mask_w")
        elif kind == "prefix":
            options["prefix"] = cols[0].number_input(t("mask_ui.prefix"), 0, T, min(4, T), key="mask_prefix")
        elif kind == "document":
            lengths = cols[0].text_input(t("mask_ui.documents"), f"{T // 2}, {T - T // 2}", key=f"mask_docs_{T}")
            options["documents"] = parse_lengths(lengths, t("mask_ui.documents_what"))
            options["causal"] = causal
        elif kind == "decode":
            options["q_len"] = int(cols[0].number_input(t("mask_decode_lab.q_len"), 1, T - 1, 1, key="mask_q_len"))
            options["align"] = cols[1].radio(
                t("mask_decode_lab.align"),
                ALIGNS,
                format_func=lambda align: t(f"mask_decode_lab.align_{align}"),
                key="mask_align",
            )
        return built_mask(kind, T, **options)
    except (ValueError, TypeError) as err:
        show_error(msg("mask_ui.invalid_mask", error=err))
        st.stop()


MASK_EDIT_TOKENS = 24  # the clickable grid is offered up to this many tokens; longer texts upload a file


def custom_mask_input(labels: list[str], causal: bool) -> LabMask | None:
    """A user's own (T, T) mask, uploaded or edited by clicking; None (after saying why) until there is one."""
    T = len(labels)
    upload, edit = st.tabs([t("mask_ui.upload_tab"), t("mask_ui.edit_tab")])
    with upload:
        file = st.file_uploader(
            t("mask_ui.upload", T=T, mib=settings.MASK_MAX_BYTES // 2**20),
            type=[s.lstrip(".") for s in MASK_SUFFIXES],
            key="mask_upload",
        )
        convention = st.radio(
            t("mask_ui.convention"),
            ["auto", "keep", "block"],
            format_func=lambda convention: t(f"mask_ui.convention_{convention}"),
            horizontal=True,
            key="mask_convention",
        )
    with edit:
        if T > MASK_EDIT_TOKENS:
            st.info(t("mask_ui.grid_too_long", most=MASK_EDIT_TOKENS, T=T))
            grid = None
        else:
            start = pd.DataFrame(
                (torch.ones(T, T, dtype=torch.bool).tril() if causal else torch.ones(T, T, dtype=torch.bool)).numpy(),
                index=labels,
                columns=labels,
            )
            st.caption(t("mask_ui.grid_caption"))
            grid = st.data_editor(start, key=f"mask_grid_{T}_{causal}", width="stretch")
    if file is not None:
        try:
            loaded = read_mask_bytes(file.getvalue(), file.name)
        except MaskFileError as err:
            show_error(err)
            return None
        raw = loaded.mask
        if raw.ndim == 3 and raw.shape[0] == 1:
            raw = raw[0]
        if raw.ndim != 2 or raw.shape[-1] != T or not 1 <= raw.shape[0] <= T:  # (T, T), or a decode step's (q_len, T)
            show_error(msg("mask_decode_lab.wrong_shape", name=loaded.name, shape=tuple(loaded.mask.shape), T=T))
            return None
        for note in loaded.notes:
            st.caption(tr(note, escape=markdown_text))
        if raw.dtype == torch.bool:
            if convention == "auto":
                convention, why = infer_convention(raw, offset=T - raw.shape[0])
                st.caption(t("mask_ui.inferred", convention=convention, why=why))
        else:
            convention = "additive"
        return custom_mask(raw, convention)
    if grid is not None:
        return custom_mask(torch.tensor(grid.to_numpy(dtype=bool)), "keep")
    st.info(t("mask_ui.upload_or_edit"))
    return None

"""Token view: one token's attention in every head of a layer, across layers, and as BertViz-style lines.

A long text is read a page of :data:`~attnviz.labs.token_view.WINDOW_TOKENS` tokens at a time, with the
weight that lies off the page summed, beside an overview of the whole text pooled into bins.
"""

import functools

import streamlit as st

from attnviz.app import exports
from attnviz.app.head_view import value_switch
from attnviz.app.links import keep_layer_head_in_link, link_layer_head
from attnviz.app.loading import current_source, kind_picker, kind_record
from attnviz.app.navigation import frame_settings
from attnviz.app.search import new_focus, token_search
from attnviz.app.state import valid_choice
from attnviz.app.widgets import plotly
from attnviz.core.token_display import markdown_text
from attnviz.figures.base import head_label
from attnviz.figures.token_view import (
    clicked_token,
    make_coloured_text_figure,
    make_line_view_figure,
    make_pooled_overview_figure,
    make_running_text_figure,
    make_window_share_figure,
)
from attnviz.i18n.translate import t, tr
from attnviz.labs import token_view


def _pick_clicked(key: str) -> None:
    """A click on a token of the coloured or running text chooses it."""
    token = clicked_token(st.session_state.get(key))
    if token is not None:
        st.session_state["tokens_token"] = token


def _turn_page(step: int, last: int) -> None:
    st.session_state["tokens_page"] = min(last, max(0, st.session_state.get("tokens_page", 0) + step))


st.title(t("tokens.title"))
settings = frame_settings()
source = current_source(settings)
if source is None:
    st.stop()
kind = kind_picker(source, "tokens_kind")  # an encoder-decoder: its encoder, its decoder, or cross-attention
record = kind_record(settings, source, kind)
if record is None:
    st.stop()
if record.q_len < 2:
    st.info(t("tokens.one_token"))
    st.stop()

# the token is picked on one side and its weights run over the other: the same text for self-attention; for
# cross-attention a target token's row runs over the source, a source token's column over the target
q_texts, k_texts = [tok.text for tok in record.tokens], [tok.text for tok in record.keys_tokens]
rows_first = st.session_state.get("tokens_direction", token_view.ATTENDS_TO) == token_view.ATTENDS_TO
picked, texts = (q_texts, k_texts) if rows_first else (k_texts, q_texts)
n_pick, n_tok = len(picked), len(texts)
if record.cross:
    st.caption(t("tokens.cross_caption" if rows_first else "tokens.cross_column_caption"))
# the last token to start with, and again for each new text: in a decoder it sees the whole text (token 0
# sees only itself), and an index kept from another text would name another token
if st.session_state.get("tokens_text_seen") != (seen := hash((record.model_name, kind, *q_texts, *k_texts))):
    st.session_state["tokens_text_seen"] = seen
    st.session_state["tokens_token"] = n_pick - 1
valid_choice("tokens_token", range(n_pick), n_pick - 1)
link_layer_head("tokens", range(record.n_layer), [*range(record.n_head), "mean"])
st.caption(t("tokens.caption", model=markdown_text(record.model_name), mask=tr(record.mask_summary())))
heads = [*range(record.n_head), "mean"]
head_names = {h: head_label(h) for h in heads}  # made in this run, in the session's language

token_search(record.tokens if rows_first else record.keys_tokens, key="tokens_search")
if (found := new_focus("tokens")) is not None and 0 <= found < n_pick:  # a picked occurrence moves the token
    st.session_state["tokens_token"] = found
cols = st.columns([3, 3, 1, 2])
token = cols[0].selectbox(
    t("tokens.token"), range(n_pick), key="tokens_token", format_func=lambda i: f"{i} {picked[i][:40]}"
)
directions = {d: tr(token_view.direction_label(d)) for d in token_view.DIRECTIONS}
direction = cols[1].radio(t("tokens.direction"), list(directions), key="tokens_direction", format_func=directions.get)
valid_choice("tokens_layer", range(record.n_layer), 0)
layer = cols[2].selectbox(t("tokens.layer"), range(record.n_layer), key="tokens_layer", format_func=lambda i: f"L{i}")
valid_choice("tokens_head", heads, 0)
head = cols[3].selectbox(t("tokens.head"), heads, key="tokens_head", format_func=head_names.get)

# the page follows the token when it moves (picked, clicked or found); the buttons turn it in between
size = token_view.WINDOW_TOKENS
last_page = token_view.n_pages(n_tok, size) - 1
focus = None if record.cross else token  # across two texts the token is not in the text shown
if st.session_state.get("tokens_page_token") != (token, seen):  # a new token, or the same index in a new text
    st.session_state["tokens_page_token"] = (token, seen)
    st.session_state["tokens_page"] = token_view.page_of(0 if focus is None else token, size)
page = st.session_state["tokens_page"] = min(max(0, st.session_state.get("tokens_page", 0)), last_page)
start, stop = token_view.page_bounds(n_tok, page, size)
shown = texts[start:stop]

values = value_switch(record, key="tokens_values")  # raw weights or value-weighted (Kobayashi et al. 2020)
scale = t("value_weighted_fig.colorbar") if values else None
weights = token_view.token_weights(record, layer, token, direction, values)  # (n_head, T)
share = token_view.window_share(weights, start, stop)
row = token_view.head_row(weights, head)  # (T,)
row_share = token_view.window_share(row[None], start, stop)
meta = exports.record_metadata(record, layer=layer, token=token, direction=direction)

st.subheader(t("tokens.window", head=head_names[head]))
if last_page > 0:
    nav = st.columns([1, 4, 1], vertical_alignment="center")
    nav[0].button(
        t("tokens.previous"), key="tokens_prev", on_click=_turn_page, args=(-1, last_page), disabled=page == 0
    )
    nav[1].caption(t("tokens.page", first=start, last=stop - 1, n=n_tok, page=page + 1, pages=last_page + 1))
    nav[2].button(
        t("tokens.next"), key="tokens_next", on_click=_turn_page, args=(1, last_page), disabled=page == last_page
    )
plotly(
    make_running_text_figure(
        row[start:stop],
        shown,
        focus=focus,
        first=start,
        share=(float(row_share.before[0]), float(row_share.after[0])) if last_page > 0 else None,
        scale_label=scale,
    ),
    key="tokens_running",
    on_select=functools.partial(_pick_clicked, "tokens_running"),
    selection_mode="points",
)
st.caption(t("tokens.window_caption"))

st.subheader(t("tokens.every_head"))
plotly(
    make_coloured_text_figure(weights[:, start:stop], shown, focus=focus, first=start, scale_label=scale),
    key="tokens_text",
    tensors=exports.TensorExport.of({"value_weighted" if values else "weights": weights}, meta),
    on_select=functools.partial(_pick_clicked, "tokens_text"),
    selection_mode="points",
)
if last_page > 0:
    head_rows = [head_names[h] for h in range(record.n_head)]
    plotly(make_window_share_figure(share, head_rows, title=t("tokens.share_title")), key="tokens_share")
    st.subheader(t("tokens.overview"))
    pooled = token_view.pooled_overview(token_view.heads_and_mean(weights))  # (n_head + 1, n_bin)
    plotly(
        make_pooled_overview_figure(pooled, [*head_rows, head_names["mean"]], window=(start, stop), focus=focus),
        key="tokens_overview",
    )
    st.caption(t("tokens.overview_caption", b=pooled.bin_size, n=n_tok))

st.subheader(t("tokens.across_layers", head=head_names[head]))
layers = token_view.across_layers(record, token, direction, values)  # (n_layer, n_head, T)
rows = layers.nanmean(dim=1) if head == "mean" else layers[:, int(head)]  # (n_layer, T)
names = [f"L{i}" for i in range(record.n_layer)]
keep_layer_head_in_link(layer, head)
plotly(
    make_coloured_text_figure(rows[:, start:stop], shown, focus=focus, first=start, row_names=names, scale_label=scale),
    key="tokens_layers",
    tensors=exports.TensorExport.of(
        {"value_weighted" if values else "weights": layers}, {**meta, "head_shown": str(head)}
    ),
)

with st.expander(t("tokens.several")):
    valid_choice("tokens_several", range(n_pick), [])
    chosen = st.multiselect(
        t("tokens.tokens"), range(n_pick), key="tokens_several", format_func=lambda i: f"{i} {picked[i][:40]}"
    )
    reductions = {r: t(f"tokens.reduce_{r}") for r in token_view.REDUCTIONS}
    reduce = st.radio(
        t("tokens.combine_by"), token_view.REDUCTIONS, key="tokens_reduce", horizontal=True, format_func=reductions.get
    )
    if chosen:
        combined = token_view.selected_tokens(record, layer, chosen, reduce, direction, values)
        several = make_coloured_text_figure(combined[:, start:stop], shown, first=start, scale_label=scale)
        plotly(several, key="tokens_several_fig")

st.subheader(t("tokens.lines"))
if record.cross:  # two texts: the Heads page draws cross-attention as lines, every head at once
    st.caption(t("tokens.lines_cross"))
elif n_tok > token_view.LINE_VIEW_TOKENS:
    st.caption(t("tokens.lines_limit", limit=token_view.LINE_VIEW_TOKENS))
else:
    cols = st.columns(2, vertical_alignment="bottom")
    line_heads = ["all", *range(record.n_head)]
    valid_choice("tokens_lines_head", line_heads, "all")
    only_head = cols[0].selectbox(
        t("tokens.lines_heads"),
        line_heads,
        key="tokens_lines_head",
        format_func=lambda h: t("tokens.lines_all") if h == "all" else head_names[h],
    )
    only = cols[1].toggle(t("tokens.only_chosen"), key="tokens_lines_focus", value=True)
    full = token_view.layer_weights(record, layer)  # (n_head, T, T)
    heads_on = None if only_head == "all" else [int(only_head)]
    lines = make_line_view_figure(full, texts, heads_on, focus=token if only else None, direction=direction)
    plotly(lines, key="tokens_lines", tensors=exports.TensorExport.of({"weights": full}, meta))
    st.caption(t("tokens.lines_caption"))

st.subheader(t("tokens.why"))
if st.toggle(t("tokens.why_toggle"), key="tokens_why", value=False) and not record.keeps_qk:
    st.info(tr(current_source(settings).route_note))  # the split needs the q and k the eager route never sees
elif st.session_state.get("tokens_why"):
    from attnviz.figures.logit_parts import make_band_parts_figure, make_dimension_parts_figure
    from attnviz.labs import logit_parts

    cols = st.columns([1, 3, 1])
    valid_choice("tokens_why_head", range(record.n_head), 0)
    why_head = cols[0].selectbox(
        t("tokens.head"), range(record.n_head), key="tokens_why_head", format_func=head_names.get
    )
    seen = record.mask(layer, (token, token + 1), (0, record.k_len))[0].nonzero()[:, 0].tolist()
    if not seen:
        st.caption(t("tokens.pad_row"))
    else:
        row = record.weights(layer, why_head, (token, token + 1), (0, record.k_len))[0]  # (k_len,)
        valid_choice("tokens_why_key", seen, int(row.argmax()))  # where the head attends most
        key = cols[1].selectbox(
            t("tokens.why_key"),
            seen,
            key="tokens_why_key",
            format_func={
                i: t("tokens.why_key_option", i=i, text=texts[i][:40], weight=float(row[i])) for i in seen
            }.get,
        )
        sort = cols[2].toggle(t("tokens.largest_first"), key="tokens_why_sort")
        rope = logit_parts.rope_frequencies(current_source(settings), record.layers[layer].q.shape[-1])
        parts = logit_parts.logit_parts(record, layer, why_head, token, key, rope.inv_freq)
        bands = logit_parts.band_summary(parts)
        where = t("tokens.why_where", layer=layer, head=head_names[why_head], token=token, key=key)
        plotly(
            make_dimension_parts_figure(parts, sort=sort, title=t("tokens.per_dimension", where=where)),
            key="tokens_why_dims",
        )
        bands_title = t("tokens.per_band" if rope.rope else "tokens.per_pair", where=where)
        plotly(make_band_parts_figure(bands, parts, title=bands_title), key="tokens_why_bands")
        st.markdown(tr(logit_parts.describe_parts(parts, bands)))
        notes = [
            t("tokens.bars_note", scale=parts.scale),
            t("tokens.frequencies" if rope.rope else "tokens.pairs", source=rope.source),
        ]
        if parts.softcap is not None:
            notes.append(t("tokens.softcap", cap=parts.softcap, logit=parts.logit, capped=parts.capped_logit))
        if rope.rope:
            share = logit_parts.position_vs_content(record, layer, why_head, rope.inv_freq)
            n = min(logit_parts.POSITION_TOKENS, record.q_len)
            notes.append(t("tokens.position_or_content", n=n, share=share))
        st.caption(" ".join(notes))

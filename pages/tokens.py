"""Token view: one token's attention in every head of a layer, across layers, and as BertViz-style lines."""

import streamlit as st

from attnviz.app import exports
from attnviz.app.links import keep_layer_head_in_link, link_layer_head
from attnviz.app.loading import current_record, current_source
from attnviz.app.navigation import frame_settings
from attnviz.app.state import valid_choice
from attnviz.app.widgets import plotly
from attnviz.core.token_display import markdown_text
from attnviz.figures.base import head_label
from attnviz.figures.token_view import clicked_token, make_coloured_text_figure, make_line_view_figure
from attnviz.i18n.translate import t, tr
from attnviz.labs import token_view


def _pick_clicked() -> None:
    """A click on a token of the coloured text chooses it."""
    token = clicked_token(st.session_state.get("tokens_text"))
    if token is not None:
        st.session_state["tokens_token"] = token


st.title(t("tokens.title"))
settings = frame_settings()
record = current_record(settings)
if record is None:
    st.stop()
if record.q_len < 2:
    st.info(t("tokens.one_token"))
    st.stop()

texts = [tok.text for tok in record.tokens]
n_tok = record.q_len
# the last token to start with: in a decoder it sees the whole text (token 0 sees only itself)
valid_choice("tokens_token", range(n_tok), n_tok - 1)
link_layer_head("tokens", range(record.n_layer), [*range(record.n_head), "mean"])
st.caption(t("tokens.caption", model=markdown_text(record.model_name), mask=tr(record.mask_summary())))
heads = [*range(record.n_head), "mean"]
head_names = {h: head_label(h) for h in heads}  # made in this run, in the session's language

cols = st.columns([2, 2, 1])
token = cols[0].selectbox(
    t("tokens.token"), range(n_tok), key="tokens_token", format_func=lambda i: f"{i} {texts[i][:40]}"
)
directions = {d: tr(token_view.direction_label(d)) for d in token_view.DIRECTIONS}
direction = cols[1].radio(t("tokens.direction"), list(directions), key="tokens_direction", format_func=directions.get)
valid_choice("tokens_layer", range(record.n_layer), 0)
layer = cols[2].selectbox(t("tokens.layer"), range(record.n_layer), key="tokens_layer", format_func=lambda i: f"L{i}")

st.subheader(t("tokens.every_head"))
weights = token_view.token_weights(record, layer, token, direction)  # (n_head, T)
fig = make_coloured_text_figure(weights, texts, focus=token)
meta = exports.record_metadata(record, layer=layer, token=token, direction=direction)
plotly(
    fig,
    key="tokens_text",
    tensors=exports.TensorExport.of({"weights": weights}, meta),
    on_select=_pick_clicked,
    selection_mode="points",
)

st.subheader(t("tokens.across_layers"))
valid_choice("tokens_head", heads, 0)
head = st.selectbox(t("tokens.head"), heads, key="tokens_head", format_func=head_names.get)
layers = token_view.across_layers(record, token, direction)  # (n_layer, n_head, T)
rows = layers.nanmean(dim=1) if head == "mean" else layers[:, int(head)]  # (n_layer, T)
names = [f"L{i}" for i in range(record.n_layer)]
keep_layer_head_in_link(layer, head)
plotly(
    make_coloured_text_figure(rows, texts, focus=token, row_names=names),
    key="tokens_layers",
    tensors=exports.TensorExport.of({"weights": layers}, {**meta, "head_shown": str(head)}),
)

with st.expander(t("tokens.several")):
    valid_choice("tokens_several", range(n_tok), [])
    chosen = st.multiselect(
        t("tokens.tokens"), range(n_tok), key="tokens_several", format_func=lambda i: f"{i} {texts[i][:40]}"
    )
    reductions = {r: t(f"tokens.reduce_{r}") for r in token_view.REDUCTIONS}
    reduce = st.radio(
        t("tokens.combine_by"), token_view.REDUCTIONS, key="tokens_reduce", horizontal=True, format_func=reductions.get
    )
    if chosen:
        combined = token_view.selected_tokens(record, layer, chosen, reduce, direction)
        plotly(make_coloured_text_figure(combined, texts), key="tokens_several_fig")

st.subheader(t("tokens.lines"))
if n_tok > token_view.LINE_VIEW_TOKENS:
    st.caption(t("tokens.lines_limit", limit=token_view.LINE_VIEW_TOKENS))
else:
    only = st.toggle(t("tokens.only_chosen"), key="tokens_lines_focus", value=True)
    full = token_view.layer_weights(record, layer)  # (n_head, T, T)
    lines = make_line_view_figure(full, texts, focus=token if only else None, direction=direction)
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

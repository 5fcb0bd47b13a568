"""Token view: one token's attention in every head of a layer, across layers, and as BertViz-style lines."""

import streamlit as st

from attnviz import token_view, ui
from attnviz.record import head_label
from attnviz.token_display import markdown_text
from attnviz.token_view_figures import clicked_token, make_coloured_text_figure, make_line_view_figure


def _pick_clicked() -> None:
    """A click on a token of the coloured text chooses it."""
    token = clicked_token(st.session_state.get("tokens_text"))
    if token is not None:
        st.session_state["tokens_token"] = token


st.title("Token view")
settings = ui.frame_settings()
record = ui.current_record(settings)
if record is None:
    st.stop()
if record.q_len < 2:
    st.info("With one token there is nothing to attend to but itself: type a few more words in the sidebar.")
    st.stop()

texts = [tok.text for tok in record.tokens]
n_tok = record.q_len
# the last token to start with: in a decoder it sees the whole text (token 0 sees only itself)
ui.valid_choice("tokens_token", range(n_tok), n_tok - 1)
st.caption(
    f"**{markdown_text(record.model_name)}**, mask: {record.mask_summary()}. Pick a token (or click one in the text): "
    "each row colours the text by that head's weight. Grey cells are masked (the token cannot see them)."
)

cols = st.columns([2, 2, 1])
token = cols[0].selectbox("Token", range(n_tok), key="tokens_token", format_func=lambda i: f"{i} {texts[i][:40]}")
direction = cols[1].radio(
    "Direction", list(token_view.DIRECTIONS), key="tokens_direction", format_func=token_view.DIRECTIONS.get
)
ui.valid_choice("tokens_layer", range(record.n_layer), 0)
layer = cols[2].selectbox("Layer", range(record.n_layer), key="tokens_layer", format_func=lambda i: f"L{i}")

st.subheader("Every head of the layer")
weights = token_view.token_weights(record, layer, token, direction)  # (n_head, T)
fig = make_coloured_text_figure(weights, texts, focus=token)
ui.plotly(fig, key="tokens_text", on_select=_pick_clicked, selection_mode="points")

st.subheader("Across layers")
heads = [*range(record.n_head), "mean"]
ui.valid_choice("tokens_head", heads, 0)
head = st.selectbox("Head", heads, key="tokens_head", format_func=head_label)
layers = token_view.across_layers(record, token, direction)  # (n_layer, n_head, T)
rows = layers.nanmean(dim=1) if head == "mean" else layers[:, int(head)]  # (n_layer, T)
names = [f"L{i}" for i in range(record.n_layer)]
ui.plotly(make_coloured_text_figure(rows, texts, focus=token, row_names=names), key="tokens_layers")

with st.expander("Several tokens at once (summed or averaged)"):
    ui.valid_choice("tokens_several", range(n_tok), [])
    chosen = st.multiselect("Tokens", range(n_tok), key="tokens_several", format_func=lambda i: f"{i} {texts[i][:40]}")
    reduce = st.radio("Combine by", token_view.REDUCTIONS, key="tokens_reduce", horizontal=True)
    if chosen:
        combined = token_view.selected_tokens(record, layer, chosen, reduce, direction)
        ui.plotly(make_coloured_text_figure(combined, texts), key="tokens_several_fig")

st.subheader("Lines")
if n_tok > token_view.LINE_VIEW_TOKENS:
    st.caption(f"The line view draws every pair of tokens, so it stops at {token_view.LINE_VIEW_TOKENS} tokens.")
else:
    only = st.toggle("Only the chosen token's lines", key="tokens_lines_focus", value=True)
    full = token_view.layer_weights(record, layer)  # (n_head, T, T)
    lines = make_line_view_figure(full, texts, focus=token if only else None, direction=direction)
    ui.plotly(lines, key="tokens_lines")
    st.caption(
        "Queries on the left, keys on the right; a line's opacity and width follow the weight. Click a head in the legend to hide or show it."
    )

st.subheader("Why this head attends there")
if st.toggle("Split one logit into the parts that add up to it", key="tokens_why", value=False):
    from attnviz import logit_parts
    from attnviz.logit_parts_figures import make_band_parts_figure, make_dimension_parts_figure

    cols = st.columns([1, 3, 1])
    ui.valid_choice("tokens_why_head", range(record.n_head), 0)
    why_head = cols[0].selectbox("Head", range(record.n_head), key="tokens_why_head", format_func=head_label)
    seen = record.mask(layer, (token, token + 1), (0, record.k_len))[0].nonzero()[:, 0].tolist()
    if not seen:
        st.caption("This token's row is hidden (a pad): it attends nowhere that means anything.")
    else:
        row = record.weights(layer, why_head, (token, token + 1), (0, record.k_len))[0]  # (k_len,)
        ui.valid_choice("tokens_why_key", seen, int(row.argmax()))  # where the head attends most
        key = cols[1].selectbox(
            "Key (the token attended to)",
            seen,
            key="tokens_why_key",
            format_func=lambda i: f"{i} {texts[i][:40]} (weight {float(row[i]):.3f})",
        )
        sort = cols[2].toggle("Largest first", key="tokens_why_sort")
        rope = logit_parts.rope_frequencies(ui.current_source(settings), record.layers[layer].q.shape[-1])
        parts = logit_parts.logit_parts(record, layer, why_head, token, key, rope.inv_freq)
        bands = logit_parts.band_summary(parts)
        where = f"L{layer} {head_label(why_head)}, query {token} → key {key}"
        ui.plotly(
            make_dimension_parts_figure(parts, sort=sort, title=f"per head dimension, {where}"), key="tokens_why_dims"
        )
        pairs = "frequency band" if rope.rope else "dimension pairs (i, i + head_dim/2)"
        ui.plotly(make_band_parts_figure(bands, parts, title=f"per {pairs}, {where}"), key="tokens_why_bands")
        st.markdown(logit_parts.describe_parts(parts, bands))
        notes = [
            f"Each bar is q[d]·k[d]·scale (scale {parts.scale:.4g}) with q and k after any position rotation; the bars add up "
            "to the dashed logit exactly. A pair is dimensions i and i + head_dim/2, which RoPE rotates together.",
            f"Frequencies: {rope.source}." if rope.rope else f"Pairs: {rope.source}.",
        ]
        if parts.softcap is not None:
            notes.append(
                f"This model soft-caps its logits (cap {parts.softcap:g}): the parts add up to the logit before the cap, "
                f"{parts.logit:.3f}; the softmax saw {parts.capped_logit:.3f}."
            )
        if rope.rope:
            share = logit_parts.position_vs_content(record, layer, why_head, rope.inv_freq)
            n = min(logit_parts.POSITION_TOKENS, record.q_len)
            notes.append(
                f"Position or content: over the first {n} tokens, the fastest quarter of the pairs carries "
                f"**{share:.0%}** of how this head's logits vary across the keys a query sees (near 100%: it picks keys "
                "by relative position; near 0%: by the slow pairs, which act as content)."
            )
        st.caption(" ".join(notes))

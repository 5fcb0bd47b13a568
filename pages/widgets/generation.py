"""The Generation page's encoder-decoder part: the model writes its target, and each step reads the source."""

from __future__ import annotations

import streamlit as st

from attnviz import settings as limits
from attnviz.app.loading import cached_job, pair_need
from attnviz.app.state import Settings, valid_choice
from attnviz.app.weights_note import generation_note, random_weights_note
from attnviz.app.widgets import layer_head_picker, plotly, show_error
from attnviz.core.token_display import markdown_text
from attnviz.errors import ModelUnavailableError
from attnviz.figures.base import head_label, make_head_heatmap_figure
from attnviz.i18n.translate import t
from attnviz.labs.alignment import ranked_heads
from attnviz.models.record import short_text


def encoder_decoder_steps(source, settings: Settings) -> None:
    """Greedy decoding of an encoder-decoder on the sidebar's source: what it wrote, then the cross-attention of
    each step over the source (step s reads the token before it and writes target token s)."""
    n_new = st.slider(
        t("generation.n_new"), 1, limits.MAX_TARGET_GENERATED, value=limits.TARGET_GENERATED, key="gen_seq2seq_new"
    )
    try:
        pair = cached_job(
            "pair",
            (*settings.key(), "", n_new),
            lambda progress: source.run_pair(
                settings.text, "", settings.max_tokens, n_generate=n_new, progress=progress
            ),
            t("generation.generating"),
            need=pair_need(source, settings.text, settings.max_tokens, n_new + 1),
        )
    except (ModelUnavailableError, ValueError) as err:
        show_error(err)
        return
    random_weights_note(source)
    st.markdown(t("generation.seq2seq_wrote"))
    st.code(pair.target_text, language=None, wrap_lines=True)
    written_ids = pair.target_ids
    generation_note(written_ids, pair.target_text, pair.cross.tokens[1].text if written_ids else "")
    cross = pair.cross
    n_steps = len(pair.target_ids)
    st.caption(t("generation.seq2seq_caption", n_source=len(pair.source_tokens), n_steps=n_steps))
    if "gen_seq2seq_layer" not in st.session_state:  # open on the most monotonic head: the one that aligns
        top = ranked_heads(cross).iloc[0]
        st.session_state.gen_seq2seq_layer, st.session_state.gen_seq2seq_head = int(top.layer), int(top["head"])
    layer, head = layer_head_picker(cross.n_layer, cross.n_head, key="gen_seq2seq")
    written = [tok.text for tok in cross.tokens[1 : n_steps + 1]]
    rows = [f"{i + 1} → {short_text(text)}" for i, text in enumerate(written)]  # step s writes target token s
    source_labels = cross.key_labels()
    valid_choice("gen_seq2seq_step", range(1, n_steps + 1), 1)
    step = st.slider(t("generation.step"), 1, n_steps, key="gen_seq2seq_step") if n_steps > 1 else 1
    weights = cross.weights(layer, head, (0, n_steps), (0, cross.k_len))  # (steps, source tokens)
    fig = make_head_heatmap_figure(
        weights, rows, source_labels, title=t("generation.seq2seq_title", layer=layer, head=head_label(head))
    )
    fig.add_shape(type="rect", xref="paper", x0=0, x1=1, yref="y", y0=step - 1.5, y1=step - 0.5, line={"width": 2})
    plotly(fig, key="gen_seq2seq_rows")
    top = weights[step - 1].topk(min(3, cross.k_len))
    most = t("generation.list_sep").join(
        t("generation.weighted_token", token=markdown_text(source_labels[int(i)]), weight=float(w))
        for w, i in zip(*top, strict=True)
    )
    st.markdown(t("generation.seq2seq_step", step=step, token=markdown_text(written[step - 1]), most=most))

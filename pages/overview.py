"""Overview: attention as dynamic weighted aggregation, Q/K/V, the formula, and where to go next."""

import streamlit as st

from attnviz import ui
from attnviz.i18n import t
from attnviz.token_display import markdown_text

TOKENS_SHOWN = 64  # the caption lists this many tokens, then "…"

st.title(t("overview.title"))
st.markdown(t("overview.intro"))
st.latex(r"\operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}} + M\right) V")
st.markdown(t("overview.formula", sqrt_dk=r"$\sqrt{d_k}$", d_model=r"$d_{\text{model}}$"))

record = ui.current_record(ui.frame_settings())
if record is not None:
    cols = st.columns(4)
    cols[0].metric(t("overview.metric_tokens"), f"{len(record.tokens):,}")
    cols[1].metric(t("overview.metric_layers"), record.n_layer)
    cols[2].metric(t("overview.metric_query_heads"), record.n_head)
    cols[3].metric(t("overview.metric_kv_heads"), record.n_kv_head)
    st.caption(
        t(
            "overview.model_caption",
            model=markdown_text(record.model_name),
            implementation=record.implementation,
        )
    )
    # user text is data: every token escaped, so "__init__" or "**x**" reads as typed, not as bold
    shown = " · ".join(markdown_text(token.text) for token in record.tokens[:TOKENS_SHOWN])
    more = " …" if len(record.tokens) > TOKENS_SHOWN else ""
    st.caption(t("overview.tokens_caption", tokens=shown, more=more))

st.subheader(t("overview.pages"))
PAGE_LINKS = [
    ("pages/heads.py", t("overview.link_heads"), "🧠"),
    ("pages/tokens.py", t("overview.link_tokens"), "🔤"),
    ("pages/head_roles.py", t("overview.link_head_roles"), "🧩"),
    ("pages/parity.py", t("overview.link_parity"), "⚖️"),
    ("pages/generation.py", t("overview.link_generation"), "✍️"),
    ("pages/padding.py", t("overview.link_padding"), "🧱"),
    ("pages/masks.py", t("overview.link_masks"), "🎭"),
    ("pages/kv_cache.py", t("overview.link_kv_cache"), "🗄️"),
    ("pages/scaling.py", t("overview.link_scaling"), "📐"),
    ("pages/training.py", t("overview.link_training"), "📉"),
    ("pages/walkthrough.py", t("overview.link_walkthrough"), "🪜"),
    ("pages/cost.py", t("overview.link_cost"), "⏱️"),
]
for path, label, icon in PAGE_LINKS:
    st.page_link(path, label=label, icon=icon)

"""Overview: attention as dynamic weighted aggregation, Q/K/V, the formula, and where to go next."""

import streamlit as st

from attnviz.app.loading import current_record
from attnviz.app.navigation import SECTIONS, frame_settings
from attnviz.core.token_display import markdown_text
from attnviz.i18n.translate import t

TOKENS_SHOWN = 64  # the caption lists this many tokens, then "…"

st.title(t("overview.title"))
st.page_link(
    "pages/tour.py", label=t("overview.link_tour"), icon=SECTIONS["attention"]["tour"]
)  # a first visit's way in
st.markdown(t("overview.intro"))
st.latex(r"\operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}} + M\right) V")
st.markdown(t("overview.formula", sqrt_dk=r"$\sqrt{d_k}$", d_model=r"$d_{\text{model}}$"))

record = current_record(frame_settings())
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
for section, section_pages in SECTIONS.items():  # the menu's sections, each page with what it shows
    st.markdown(f"**{t(f'nav_sections.{section}')}**")
    for name, icon in section_pages.items():
        if name not in ("overview", "tour"):  # the tour's link is the page's first line
            st.page_link(f"pages/{name}.py", label=t(f"overview.link_{name}"), icon=icon)

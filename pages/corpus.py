"""Corpus: every head over many texts, placed on two metrics with its spread, and the texts where a head does most."""

import streamlit as st

from attnviz.app import corpus_view
from attnviz.app.navigation import frame_settings
from attnviz.i18n.translate import t

st.title(t("corpus.title"))
settings = frame_settings()
corpus_view.follow_heads_link()
run = corpus_view.open_run(settings)
if run is None:
    st.stop()
metrics, shares = corpus_view.run_metrics(run)
corpus_view.run_caption(run, len(metrics))
if metrics.empty:
    st.info(t("corpus.no_heads"))
    st.stop()
head = corpus_view.place_heads(run, metrics, shares)
if head is not None:
    corpus_view.top_texts(run, head, metrics, settings)

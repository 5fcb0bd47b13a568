"""The reference for a first paint (benchmarks/first_chart.py): a text-only Streamlit page."""

import streamlit as st

st.title("A text-only page")
st.write("attnviz-first-paint: a paragraph of text, the least a Streamlit page can draw.")

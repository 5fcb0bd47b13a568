"""training: under construction in this working tree (issue 7)."""

import streamlit as st

st.title("training")

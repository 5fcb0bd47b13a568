"""The reference for a first chart (benchmarks/first_chart.py): a Streamlit page with one 30 x 30 Plotly heatmap."""

import numpy as np
import plotly.graph_objects as go
import streamlit as st

st.title("A one-chart page")
z = np.random.default_rng(0).random((30, 30))
st.plotly_chart(go.Figure(go.Heatmap(z=z, colorscale="Viridis")), width="stretch")

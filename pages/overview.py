"""Overview: attention as dynamic weighted aggregation, Q/K/V, the formula, and where to go next."""

import streamlit as st

from attnviz import ui
from attnviz.token_display import markdown_text

st.title("attnviz: see what attention does to your text")
st.markdown(
    """
Attention is a **dynamic weighted average**. Every position builds its new
representation as a mix of all the positions it may see, and the mixing
weights are computed on the fly from the content itself.

- **Q (query)**: what a position is looking for.
- **K (key)**: what each position offers to be found by.
- **V (value)**: the content a position hands over once it is chosen.
"""
)
st.latex(r"\operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}} + M\right) V")
st.markdown(
    """
Dividing by $\\sqrt{d_k}$ keeps the variance of $q \\cdot k$ near 1, so the
softmax does not saturate and gradients keep flowing. $M$ is the mask: $0$
where a query may attend, $-\\infty$ where it may not (the future, padding).
**Multi-head** attention runs several of these in parallel on slices of
$d_{\\text{model}}$, so each head can specialise; **GQA/MQA** let query heads
share key/value heads to shrink the KV cache.
"""
)

record = ui.current_record(ui.frame_settings())
if record is not None:
    cols = st.columns(4)
    cols[0].metric("tokens", f"{len(record.tokens):,}")
    cols[1].metric("layers", record.n_layer)
    cols[2].metric("query heads", record.n_head)
    cols[3].metric("key/value heads", record.n_kv_head)
    st.caption(f"Model: **{markdown_text(record.model_name)}**. Weights from `{record.implementation}`.")
    shown = " · ".join(markdown_text(t.text) for t in record.tokens[:64])
    st.caption("Tokens: " + shown + (" …" if len(record.tokens) > 64 else ""))

st.subheader("Pages")
PAGE_LINKS = [
    ("pages/heads.py", "Heads: every head's pattern, the layer × head grid and per-head statistics", "🧠"),
    ("pages/tokens.py", "Token view: one token's attention in every head and layer, as coloured text and lines", "🔤"),
    (
        "pages/head_roles.py",
        "Head roles: sink, previous-token, local heads; redundant heads; the sink as text grows",
        "🧩",
    ),
    ("pages/parity.py", "Parity: our attention, fed a pretrained model's weights, reproduces it", "⚖️"),
    ("pages/generation.py", "Generation: each generated token's attention over what came before", "✍️"),
    ("pages/padding.py", "Padding: a batch of sentences, its padding mask and pads kept out", "🧱"),
    (
        "pages/masks.py",
        "Mask lab: build or upload a mask, see it act on real attention, and let the doctor check it",
        "🎭",
    ),
    ("pages/kv_cache.py", "KV cache: exact memory for real model configs, checked against real caches", "🗄️"),
    ("pages/scaling.py", "Scaling: why the scores are divided by √d_k, on this model's real q and k", "📐"),
    ("pages/training.py", "Training: a small model learns with 1/√d_k and gets stuck without it", "📉"),
    ("pages/walkthrough.py", "Walkthrough: one attention layer, step by step, beside the code that ran", "🪜"),
    ("pages/cost.py", "Cost: why long attention needs tiling, measured on this machine", "⏱️"),
]
for path, label, icon in PAGE_LINKS:
    st.page_link(path, label=label, icon=icon)

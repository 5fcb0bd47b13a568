"""The Streamlit app: what the pages share (loading, caching, widgets, state, the running banner).

Every way into the app imports this package before torch: app.py, serve.py and, on a fresh server's first
visit to a page's own URL, that page file (Streamlit's legacy multipage mode runs it before app.py).
"""

import os

# Before torch loads OpenMP (it reads this once): its threads sleep, not spin, while they wait for each other. On a
# busy machine a spinning thread holds a core the other needs: SmolLM2's pass took 10x as long (Mask lab, issue 37);
# the CLI and library users choose their own.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

"""attnviz served warm: ``streamlit run serve.py`` (what ``make run`` and the container image do).

The same app as ``streamlit run app.py``; the server first imports what the
first page needs, loads the default model and captures the default text
(:mod:`attnviz.app.warm`), before it accepts a connection, so its first visitor
does not wait for that. Meanwhile it gzips Streamlit's own scripts and styles,
once; it sends them gzipped, and its page asks for the first screen's chunks
while it loads, and for Plotly's when it costs the visitor least: on the Heads
page after its grid (the page's own canvas) is drawn, on the other pages with
charts while the server runs the page (:mod:`attnviz.app.static_serving`,
:mod:`attnviz.app.static_assets`).
"""

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path

import streamlit as st
from starlette.middleware import Middleware

from attnviz.app.static_assets import StaticAssets, streamlit_static_dir
from attnviz.app.static_serving import StaticCompression
from attnviz.app.warm import warm_up

ASSETS = StaticAssets(streamlit_static_dir())


@asynccontextmanager
async def _lifespan(_app):
    # one worker beside the warm-up's imports: on 2 cores both finish before the first visitor
    await asyncio.gather(asyncio.to_thread(warm_up), asyncio.to_thread(ASSETS.prepare, None, 1))
    yield None


MIDDLEWARE = [Middleware(StaticCompression, assets=ASSETS)]  # Streamlit's own files gzipped, its page asking early
app = st.App(str(Path(__file__).with_name("app.py")), lifespan=_lifespan, middleware=MIDDLEWARE)

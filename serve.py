"""attnviz served warm: ``streamlit run serve.py`` (what ``make run`` and the container image do).

The same app as ``streamlit run app.py``; the server first imports what the
first page needs and loads the default model (:mod:`attnviz.app.warm`), before
it accepts a connection, so its first visitor does not wait for that.
"""

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path

import streamlit as st

from attnviz.app.warm import warm_up


@asynccontextmanager
async def _lifespan(_app):
    await asyncio.to_thread(warm_up)
    yield None


app = st.App(str(Path(__file__).with_name("app.py")), lifespan=_lifespan)

"""Finished trainings, shared by every session of a server: the Training page's runs and the tour's.

The Training lab (:mod:`attnviz.labs.training`) trains three runs per config, 23 s for the defaults on a
2-core CPU: too slow to do twice. Its results live here, in the app layer (not with the page's widgets), so that
the server's warm-up can train the Training page's default config when it starts (the tour's "missing scale"
step draws it) and a reader who opens the Training page finds those runs already done.
"""

from __future__ import annotations

import streamlit as st

from attnviz import settings
from attnviz.app.cache import BoundedCache
from attnviz.labs.training.runs import RunResult, TrainingConfig


@st.cache_resource(show_spinner=False)
def finished_trainings() -> BoundedCache:
    """Finished trainings by config, shared read-only by every session; a stopped training is never stored."""
    return BoundedCache(max_bytes=2**20, max_entries=settings.TRAIN_CACHE_ENTRIES)


def finished(config: TrainingConfig) -> list[RunResult] | None:
    """The three runs of ``config`` if some session (or the warm-up) finished them; None otherwise."""
    found, results = finished_trainings().lookup(config)
    return results if found else None


__all__ = ["finished", "finished_trainings"]

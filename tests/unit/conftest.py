"""Set-up for a run of unit tests (`make test-fast`, or a unit test module run alone).

After collection a worker holds every test module and all they import (torch, transformers, Streamlit: millions
of objects), and every full garbage collection walks them all: Python's own, and each ``gc.collect()`` attnviz
runs before it reports free memory (0.3 s each in a worker, 0.1 s in a bare process). None of them will ever be
garbage, so they are frozen once collected (``gc.freeze``: later collections skip them), and nothing is
collected while the modules import (they make almost no garbage): the collector's CPU in a `make test-fast`
worker went from 4.4 s to 0.7 s (issue 39). A hook here wraps collection only where this file is loaded before
it, that is where the paths pytest was given lie in tests/unit: `make test` collects it late, and as before.
"""

import gc

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    gc.disable()
    try:
        return (yield)
    finally:
        gc.freeze()
        gc.enable()

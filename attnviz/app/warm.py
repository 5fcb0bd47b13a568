"""What a server does once at start so that its first visitor does not wait for it: :func:`warm_up`.

The first session of a fresh server would otherwise pay for importing torch,
plotly, pandas and every module the first page uses, for building the
default model and for capturing the default text: longer than drawing the page
itself. Every new visitor lands on the default text, so its capture is made here
once, and a landing run reads it from the cache (no forward pass). ``serve.py`` runs
:func:`warm_up` in the server's start-up, before it accepts a connection, so
the process's module table and model cache are full when the first visitor
arrives. ``streamlit run app.py`` still works, and pays this on its first visit.
"""

from __future__ import annotations

import importlib
import os
import sys
import time

from attnviz import settings

# what the Heads page (where a visitor lands) and the sidebar import, heaviest first
MODULES = (
    "torch",
    "plotly.graph_objects",
    "pandas",
    "attnviz.app.sidebar",
    "attnviz.app.navigation",
    "attnviz.app.loading",
    "attnviz.app.head_view",
    "attnviz.app.widgets",
    "attnviz.app.exports",
    "attnviz.figures.heads",
    "attnviz.models.registry",
)


def default_spec():
    """The source a new visitor's sidebar asks for: the embedded model at its default settings."""
    from attnviz.app.sidebar import embedded_spec
    from attnviz.app.state import DEFAULTS
    from attnviz.core.devices import resolve_device

    return embedded_spec(DEFAULTS, resolve_device(DEFAULTS["device"]))


def default_record(source, spec):
    """The default text's capture by the default model, put in the process's result cache under the key a new
    visitor's sidebar asks for (:func:`attnviz.app.loading.record_for`), as that page would compute it."""
    from attnviz.app.loading import record_job, result_cache
    from attnviz.app.state import DEFAULTS, Settings

    settings_ = Settings(DEFAULTS["text"], DEFAULTS["max_tokens"], spec)
    return result_cache().get_or_compute(("record", settings_.key()), lambda: record_job(source, settings_)(None))


def warm_up() -> dict[str, float]:
    """Import the first page's modules, load the default model and capture the default text into the shared
    caches: seconds per step."""
    timings: dict[str, float] = {}
    for name in MODULES:
        start = time.perf_counter()
        importlib.import_module(name)
        timings[name] = time.perf_counter() - start
    from attnviz.app.loading import load_source

    start = time.perf_counter()
    spec = default_spec()
    source = load_source(spec)
    timings["default model"] = time.perf_counter() - start
    start = time.perf_counter()
    default_record(source, spec)  # a new visitor's page reads it from the cache: its first run does no forward pass
    timings["default record"] = time.perf_counter() - start
    from attnviz.core.device_speed import speedup

    start = time.perf_counter()
    speedup(spec.device)  # the device's speed, measured once here rather than on a visitor's first estimate
    timings["device speed"] = time.perf_counter() - start
    # app.py always calls st.navigation: start in its multipage mode, not the legacy pages/ one, so no first
    # visitor's run goes down the legacy route (see attnviz.app.navigation.leave_legacy_multipage_mode)
    from streamlit.runtime.pages_manager import PagesManager

    PagesManager.uses_pages_directory = False
    from attnviz.app.grid_canvas import wait_for_first_map

    wait_for_first_map()  # this server's page asks for Plotly after the first map: its charts wait for that map
    if os.environ.get(settings.TOUR_WARM_ENV, "1").strip() != "0":
        from attnviz.app.tour.cache import warm_tour_in_background

        start = time.perf_counter()
        # every tour step on both examples (tens of seconds, its trainings most): in a thread of its own, the
        # server answering meanwhile; a reader asking for a step still warming waits on that same computation
        warm_tour_in_background()
        timings["tour (started)"] = time.perf_counter() - start
    print(f"attnviz: warmed up in {sum(timings.values()):.1f} s", file=sys.stderr)
    return timings

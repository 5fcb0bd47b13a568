"""What the tour runs on, and its warm-up: the tour model's spec, a step's context, :func:`warm_tour`.

The tour runs on one model (:data:`attnviz.settings.TOUR_MODEL`) on the sidebar's device and dtype, so its spec is
the one the sidebar builds when a reader picks that model: a step's results and the full page's share one cache
entry. A server computes, when it starts, everything every step draws on each language's default example
(:func:`warm_tour`): a reader clicking through the tour waits for no forward pass.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

from attnviz import settings as limits
from attnviz.app.loading import load_source, record_job, result_cache
from attnviz.app.state import DEFAULTS, Settings
from attnviz.app.tour.context import TourContext, tour_max_tokens
from attnviz.app.tour.views import VIEWS
from attnviz.core.devices import Placement, resolve_device
from attnviz.labs.tour.steps import STEPS, TourStep
from attnviz.models.registry import SourceSpec
from attnviz.models.source import AttentionSource


def tour_spec(device: str | None = None, dtype: str = "auto") -> SourceSpec:
    """The tour model on ``device`` (resolved; None: the sidebar's default) in ``dtype``: the spec the sidebar
    builds for that model with these settings, so the tour and the pages key their results alike."""
    device = resolve_device(DEFAULTS["device"]) if device is None else device
    return SourceSpec(limits.TOUR_MODEL, device, placement=Placement(dtype=dtype))


def tour_settings(text: str, own_text: bool, spec: SourceSpec | None = None) -> Settings:
    """The settings a step's capture uses: the text, the tour's token limit for it (an example whole, the
    reader's text up to :data:`attnviz.settings.TOUR_TOKENS`) and the tour model (``spec``; None: the default)."""
    return Settings(text, tour_max_tokens(own_text), spec or tour_spec())


def tour_context(
    step: TourStep | str,
    text: str,
    own_text: bool = False,
    spec: SourceSpec | None = None,
    source: AttentionSource | None = None,
) -> TourContext:
    """Step ``step`` (its key or itself) on ``text``; the model loaded (the process's cached one) unless given."""
    if isinstance(step, str):
        step = next(s for s in STEPS if s.key == step)
    settings_ = tour_settings(text, own_text, spec)
    return TourContext(step, settings_, source if source is not None else load_source(settings_.spec), own_text)


def warm_examples() -> list[str]:
    """The examples a reader starts the tour on (one per language), each once."""
    return list(dict.fromkeys(limits.TOUR_EXAMPLES.values()))


def warm_tour(spec: SourceSpec | None = None, examples: list[str] | None = None) -> dict[str, float]:
    """Compute, into the process's shared cache, each language's default example's capture by the tour model (or
    ``examples``'s, by name) and everything each step draws at its default setting (each view's ``warm``): seconds
    per step, summed over the examples. A step whose warm-up fails is said in the server's log and left to compute
    on a reader's visit."""
    timings: dict[str, float] = {}
    spec = spec or tour_spec()
    start = time.perf_counter()
    source = load_source(spec)
    timings["tour model"] = time.perf_counter() - start
    for name in examples or warm_examples():
        ctx = tour_context(STEPS[0], limits.EXAMPLES[name], spec=spec, source=source)
        start = time.perf_counter()
        # the key every page's record_for reads, computed as the warm-up of the default text is (no progress bar)
        result_cache().get_or_compute(
            ("record", ctx.settings.key()), lambda ctx=ctx: record_job(source, ctx.settings)(None)
        )
        timings["tour record"] = timings.get("tour record", 0.0) + time.perf_counter() - start
        for step in STEPS:
            view = VIEWS.get(step.key)
            if view is None:
                continue
            start = time.perf_counter()
            try:
                view.warm(TourContext(step, ctx.settings, source))
            except Exception as err:  # one step's failure must not stop a server's start
                print(f"attnviz: the tour's {step.key} step did not warm up: {err!r}", file=sys.stderr)
            timings[step.key] = timings.get(step.key, 0.0) + time.perf_counter() - start
    return timings


_WARMING: threading.Thread | None = None
WARM_NICENESS = 10  # the background warm-up yields the CPU to a visitor's page run


def warm_tour_in_background() -> threading.Thread:
    """Start :func:`warm_tour` in a thread of its own (once per process): a server takes its first visitor
    while the tour's slow parts (its trainings) compute. A reader who asks for one of them meanwhile waits on that
    same computation: the shared cache computes a key once, its other askers waiting for that result
    (:meth:`attnviz.app.cache.BoundedCache.get_or_compute`)."""
    global _WARMING
    if _WARMING is None:

        def run() -> None:
            # behind the visitors' own work on a small machine (Linux: a thread's own niceness)
            with contextlib.suppress(AttributeError, OSError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WARM_NICENESS)
            timings = warm_tour()
            print(f"attnviz: the tour warmed up in {sum(timings.values()):.1f} s", file=sys.stderr)

        _WARMING = threading.Thread(target=run, name="attnviz-tour-warm-up", daemon=True)
        _WARMING.start()
    return _WARMING


__all__ = ["tour_context", "tour_settings", "tour_spec", "warm_examples", "warm_tour", "warm_tour_in_background"]

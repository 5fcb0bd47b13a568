"""What every step's view is given, and the few ways of drawing that every step shares.

A step's view is two functions (:class:`StepView`): ``draw(ctx)`` draws its live demonstration (the chart with
its mark, the one setting it is about, the number it states) and ``warm(ctx)`` computes, into the process's
shared result cache and under the keys ``draw`` reads, everything ``draw`` needs at its default setting. A
server runs every ``warm`` for the tour's examples when it starts (:mod:`attnviz.app.tour.cache`), so a reader's
step draws without a forward pass; the reader's own text is computed on demand, its price said first.

Results go through :func:`attnviz.app.loading.cached` / ``cached_job`` under the *same kinds and keys as the page
the step comes from* (a record under ``("record", settings.key())``, Scaling's rows under
``("scaling", settings.key(n_tokens))``, ...): the tour and the page share one computation, and their numbers
are the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import streamlit as st

from attnviz import settings as limits
from attnviz.app.loading import record_for, result_cache
from attnviz.app.progress import duration_text
from attnviz.app.state import Settings
from attnviz.core.device_speed import device_of, speedup
from attnviz.i18n.translate import t
from attnviz.labs.tour.steps import TourStep
from attnviz.models.record import AttentionRecord
from attnviz.models.registry import SourceSpec
from attnviz.models.source import AttentionSource

# a forward pass of the tour model (SmolLM2-135M) over the reader's text, at most TOUR_TOKENS (64) tokens, on the
# reference 2-core CPU: 0.76 s for 38 tokens and 1.8 s for a process's first pass, measured alone (6 Dec 2026); a
# step's own analysis adds < 0.1 s. Divided by the device's measured speed-up, as the pages' prices are.
PASS_SECONDS = 2.0
NUMBER_ICON = "🔎"  # the icon of the box that states a step's number: tests find the number by it


@dataclass(frozen=True)
class TourContext:
    """The step being drawn and what it runs on: ``settings`` holds the text (an example's or the reader's own),
    the token limit and the tour model's spec; ``source`` is that model, loaded; ``own_text`` says the text is the
    reader's (not computed at start: a step that needs a pass says its price first)."""

    step: TourStep
    settings: Settings
    source: AttentionSource
    own_text: bool = False

    @property
    def spec(self) -> SourceSpec:
        return self.settings.spec

    def record(self) -> AttentionRecord:
        """The text's capture by the tour model: the shared cache's, under the key every page reads."""
        return record_for(self.source, self.settings)

    def widget_key(self, name: str) -> str:
        """A widget's key on this step: ``tour_<step>_<name>`` (tests set a step's setting by it)."""
        return f"tour_{self.step.key}_{name}"


@dataclass(frozen=True)
class StepView:
    """How a step draws (``draw``), what it computes ahead (``warm``; see the module's docstring) and, for a
    pitfall, its row of the pitfalls table (``row``)."""

    draw: Callable[[TourContext], None]
    warm: Callable[[TourContext], None]
    # a pitfall's live finding, one line in the reader's words, for the pitfalls table (from what ``warm`` computed)
    row: Callable[[TourContext], str] | None = None


def say_number(text: str) -> None:
    """State the number a step's demonstration gives (already in the reader's words, user text in it escaped):
    one box per number, the same look on every step."""
    st.info(text, icon=NUMBER_ICON)


def warm_result(kind: str, key: tuple, compute: Callable[[], object]):
    """A result under its page's (kind, key), computed here when missing, with no progress bar: what a step's
    ``warm`` calls (the server's warm-up runs outside any page)."""
    return result_cache().get_or_compute((kind, key), compute)


def pass_seconds(source: AttentionSource) -> float:
    """About how long one pass of the tour model over the reader's text takes on ``source``'s device."""
    return PASS_SECONDS / speedup(device_of(source))


def price_first(ctx: TourContext, *keys: tuple, seconds: float | None = None) -> None:
    """On the reader's own text, before a computation not cached yet (``keys``: its (kind, key) pairs): what it
    runs and about how long it takes (``seconds``; None: one pass of the tour model). The examples were computed
    when the server started, so their steps say nothing."""
    if ctx.own_text and not all(result_cache().lookup(key)[0] for key in keys):
        seconds = pass_seconds(ctx.source) if seconds is None else seconds
        st.caption(t("tour.price", time=duration_text(seconds), n=limits.TOUR_TOKENS))


def tour_max_tokens(own_text: bool) -> int:
    """The token limit of a step's capture: the examples whole, the reader's text up to :data:`TOUR_TOKENS`."""
    return limits.TOUR_TOKENS if own_text else limits.MAX_TOKENS.default


__all__ = [
    "NUMBER_ICON",
    "PASS_SECONDS",
    "StepView",
    "TourContext",
    "pass_seconds",
    "price_first",
    "say_number",
    "tour_max_tokens",
    "warm_result",
]

"""Every step's view, by step key: the four areas' ``VIEWS`` merged (:data:`VIEWS`).

Each area's module (basics, models, pitfalls, pitfall_heads) holds the views of its steps; a step has exactly one
(``tests/unit/app/test_tour_views.py``). A step without one yet is said by the frame, not an error.
"""

from __future__ import annotations

from attnviz.app.tour import basics, models, pitfall_heads, pitfalls
from attnviz.app.tour.context import StepView

AREAS = (basics, models, pitfalls, pitfall_heads)


def merged_views() -> dict[str, StepView]:
    """The areas' views in one dict; ValueError when two areas claim the same step."""
    views: dict[str, StepView] = {}
    for area in AREAS:
        if twice := sorted(views.keys() & area.VIEWS.keys()):
            raise ValueError(f"{area.__name__} draws steps another area draws too: {', '.join(twice)}")
        views.update(area.VIEWS)
    return views


VIEWS: dict[str, StepView] = merged_views()

__all__ = ["AREAS", "VIEWS", "merged_views"]

"""The tour's steps, in the tutorial's order: what each is about and the live page it comes from.

The tutorial (on attention, in Chinese) has eight sections: the intuition (attention as a weighted average;
Q/K/V as a search), the three steps of scaled dot-product attention, why divide by √d_k, why several heads, an
implementation with its shapes, five training pitfalls, MQA/GQA and the KV cache, FlashAttention. Each section is
one step here, the pitfalls one step per pitfall after a table of all five. A step's words are in the catalogue
under ``tour_step.<key>`` (title, body, question, answer); its live demonstration is drawn by the app
(:mod:`attnviz.app.tour`), from the labs its page uses.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TourStep:
    """One step: ``key`` names its words (``tour_step.<key>.*``) and its view; ``section`` is the tutorial's
    section it demonstrates (1-8); ``page`` the live page (``pages/<page>.py``) the reader can leave for at any
    time, where the same demonstration has every setting."""

    key: str
    section: int
    page: str


STEPS: tuple[TourStep, ...] = (
    TourStep("intuition", 1, "heads"),
    TourStep("three_steps", 2, "walkthrough"),
    TourStep("scale", 3, "scaling"),
    TourStep("heads", 4, "head_roles"),
    TourStep("code", 5, "walkthrough"),
    TourStep("pitfalls", 6, "training"),
    TourStep("pitfall_scale", 6, "training"),
    TourStep("pitfall_memory", 6, "cost"),
    TourStep("pitfall_heads", 6, "training"),
    TourStep("pitfall_mask", 6, "masks"),
    TourStep("pitfall_collapse", 6, "scaling"),
    TourStep("kv", 7, "kv_cache"),
    TourStep("tiling", 8, "cost"),
)
SECTIONS = 8  # the tutorial's sections: every one has at least one step
PITFALLS = tuple(step.key for step in STEPS if step.key.startswith("pitfall_"))  # the table's rows, in its order


def step_index(key: str) -> int:
    """The position of step ``key`` in :data:`STEPS`; KeyError for a key no step has (a stale link's)."""
    for i, step in enumerate(STEPS):
        if step.key == key:
            return i
    raise KeyError(key)


__all__ = ["PITFALLS", "SECTIONS", "STEPS", "TourStep", "step_index"]

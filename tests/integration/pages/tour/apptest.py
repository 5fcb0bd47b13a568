"""Opening the tour in AppTest, as a reader's link does: ``tour_app(step, lang)``; the numbers a step states."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from attnviz import settings as limits
from attnviz.app.loading import result_cache
from attnviz.app.tour import pitfall_heads, pitfalls
from attnviz.app.tour.context import NUMBER_ICON
from attnviz.i18n.translate import set_language
from attnviz.labs.tour.heads_sweep import SweepConfig
from attnviz.labs.training.runs import TrainingConfig

ROOT = Path(__file__).resolve().parents[4]
# the Training page's smallest honest run: the same three runs, code and cache as its defaults, in a second
# (the defaults take 23 s on 2 cores); unlike every other training in the suite, so its cache entry is the tour's
SMALL_TRAINING = TrainingConfig(head_dim=16, steps=20, seed=7)
# the heads pitfall's sweep made small: the same step, the same code, fewer steps (the server's trains for seconds)
SMALL_SWEEP = SweepConfig(d_model=32, n_heads=(1, 2, 4), train_sequences=64, steps=60)
TIMEOUT_S = 300  # a step's first draw on a cold process computes its demonstration (a capture, a training)


def tour_app(step: str, lang: str = "en", **session) -> AppTest:
    """The tour page on ``step`` in ``lang`` (``?step=...&lang=...``), through app.py's frame and sidebar, run
    once; ``session`` values (a widget's key -> value: ``tour_text="own"``, ``text="..."``) set before that run.
    The test thread's language is set too: AppTest formats a widget's options in it (see test_language.py)."""
    set_language(lang)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S)
    at.query_params["lang"] = lang
    for key, value in session.items():
        at.session_state[key] = value
    at.run()  # the landing page: the navigation registers the pages, the sidebar its widgets
    at.switch_page("pages/tour.py")
    at.query_params["step"] = step
    return at.run()


def numbers(at: AppTest) -> list[str]:
    """The bodies of the boxes a step states its number in (:func:`attnviz.app.tour.context.say_number`)."""
    return [box.value for box in at.info if box.icon == NUMBER_ICON]


def small_trainings(monkeypatch) -> None:
    """The tour's two trainings at :data:`SMALL_TRAINING` and :data:`SMALL_SWEEP` for this test."""
    monkeypatch.setattr(pitfalls, "TRAINING_CONFIG", SMALL_TRAINING)
    monkeypatch.setattr(pitfall_heads, "SWEEP_CONFIG", SMALL_SWEEP)


def text_of(lang: str) -> str:
    """The tour's default example in ``lang``."""
    return limits.EXAMPLES[limits.TOUR_EXAMPLES[lang]]


def cached(kind: str, key: tuple):
    """What the tour computed, from the process's shared cache (AppTest runs the app in this process)."""
    found, value = result_cache().lookup((kind, key))
    assert found, (kind, key)
    return value

"""The tour's warm-up and its views: every step drawn by one view, every view warmed on each language's example
into the shared cache once (a second warm-up computes nothing), the tour model's spec the sidebar's own."""

import pytest

from attnviz import settings as limits
from attnviz.app import loading
from attnviz.app.tour import cache, views
from attnviz.app.tour.context import StepView
from attnviz.core.devices import Placement
from attnviz.labs.tour.steps import STEPS
from attnviz.models.registry import SourceSpec, embedded_spec


def test_every_step_has_exactly_one_view():
    claimed = [key for area in views.AREAS for key in area.VIEWS]
    assert sorted(claimed) == sorted(step.key for step in STEPS)  # none missing, none twice, none unknown
    assert views.merged_views().keys() == views.VIEWS.keys()


def test_two_areas_drawing_one_step_is_an_error(monkeypatch):
    view = StepView(draw=lambda ctx: None, warm=lambda ctx: None)
    monkeypatch.setattr(views.AREAS[0], "VIEWS", {"scale": view})
    monkeypatch.setattr(views.AREAS[1], "VIEWS", {"scale": view})
    with pytest.raises(ValueError, match="scale"):
        views.merged_views()


def test_the_tour_spec_is_the_sidebars_for_the_tour_model():
    spec = cache.tour_spec("cpu", "float32")
    assert spec == SourceSpec(limits.TOUR_MODEL, "cpu", placement=Placement(dtype="float32"))  # the pages' key
    own, example = cache.tour_settings("a b", True, spec), cache.tour_settings("a b", False, spec)
    assert (own.max_tokens, example.max_tokens) == (limits.TOUR_TOKENS, limits.MAX_TOKENS.default)
    ctx = cache.tour_context("kv", "a b", True, spec=spec, source=object())
    assert ctx.step.key == "kv" and ctx.own_text and ctx.settings == own


@pytest.mark.slow
def test_warm_tour_warms_every_view_on_each_languages_example_once(monkeypatch):
    """Every view's warm runs on each language's example with the settings a reader's step draws with, after the
    example's capture is in the shared cache under the key every page reads; a second warm-up runs no model."""
    spec = embedded_spec("cpu")  # the tiny embedded model stands in for the tour model: the plumbing is the same
    source = loading.load_source(spec)
    loading.result_cache.clear()
    warmed = []

    def warm(ctx):
        assert ("record", ctx.settings.key()) in loading.result_cache()  # the capture first
        warmed.append((ctx.step.key, ctx.settings.text, ctx.settings.max_tokens, ctx.own_text))
        loading.result_cache().get_or_compute(("fake", ctx.step.key, ctx.settings.key()), lambda: len(warmed))

    fake = {step.key: StepView(draw=lambda ctx: None, warm=warm) for step in STEPS}
    monkeypatch.setattr(cache, "VIEWS", fake)
    runs = []
    real_run = source.run
    monkeypatch.setattr(source, "run", lambda *args, **kwargs: runs.append(args) or real_run(*args, **kwargs))
    timings = cache.warm_tour(spec)
    texts = [limits.EXAMPLES[name] for name in dict.fromkeys(limits.TOUR_EXAMPLES.values())]
    assert warmed == [(step.key, text, limits.MAX_TOKENS.default, False) for text in texts for step in STEPS]
    assert len(runs) == len(texts)  # one capture an example
    assert set(timings) == {"tour model", "tour record", *(step.key for step in STEPS)}
    assert all(seconds >= 0 for seconds in timings.values())
    n_entries = len(loading.result_cache())
    cache.warm_tour(spec)
    assert len(runs) == len(texts) and len(loading.result_cache()) == n_entries  # nothing computed again


def test_a_step_whose_warm_up_fails_leaves_the_others_warmed(monkeypatch, capsys):
    spec = embedded_spec("cpu")
    loading.result_cache.clear()
    done = []

    def broken(ctx):
        raise ValueError("no")

    fake = {step.key: StepView(draw=lambda ctx: None, warm=lambda ctx: done.append(ctx.step.key)) for step in STEPS}
    fake[STEPS[0].key] = StepView(draw=lambda ctx: None, warm=broken)
    monkeypatch.setattr(cache, "VIEWS", fake)
    cache.warm_tour(spec)
    assert set(done) == {step.key for step in STEPS[1:]}
    assert f"the tour's {STEPS[0].key} step did not warm up" in capsys.readouterr().err

"""The tour's model-design steps (heads, kv, tiling) in AppTest: each draws its chart with its mark in both
languages, its number moves with its setting to what the lab gives, and equals the page it comes from (the KV
cache page's total, the Cost page's tiling difference) or the lab called directly (the merged heads, the what-if)."""

from dataclasses import replace

import pytest
from streamlit.testing.v1 import AppTest

from attnviz import settings as limits
from attnviz.app.loading import load_source, result_cache
from attnviz.app.tour import models as tour_views
from attnviz.app.tour.cache import tour_context, tour_settings, tour_spec
from attnviz.figures.tour import DIMMED_OPACITY, HIGHLIGHT_COLOR
from attnviz.i18n.translate import set_language
from attnviz.labs.cost.paths import tiling_example
from attnviz.labs.kv.config import kv_config_of
from attnviz.labs.kv.memory import estimate, human_bytes
from attnviz.labs.kv.report import whatif_summary
from attnviz.labs.tour import models
from tests.integration.pages.tour.apptest import ROOT, cached, numbers, text_of, tour_app
from tests.plotly_json import spec_of

LANGS = ("en", "zh")


@pytest.fixture(scope="module", autouse=True)
def _smollm2(smollm2):
    """The tour model, placed where the app loads it from (the test cache's conversion)."""
    return smollm2


def chart(at: AppTest, key: str) -> dict:
    return spec_of(next(c for c in at.get("plotly_chart") if c.key == key))


def frames(spec: dict) -> list[dict]:
    return [s for s in spec["layout"].get("shapes", []) if s.get("line", {}).get("color") == HIGHLIGHT_COLOR]


def page(path: str, lang: str) -> AppTest:
    """``path`` on the tour model and the example's text, in ``lang``."""
    set_language(lang)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["lang"] = lang
    at.run()
    at.selectbox(key="model").set_value(limits.TOUR_MODEL).run()
    at.text_area(key="text").input(text_of(lang)).run()
    return at.switch_page(path).run()


@pytest.mark.parametrize("lang", LANGS)
def test_heads_merges_the_layers_heads_and_says_what_one_wide_head_loses(lang):
    at = tour_app("heads", lang)
    assert not at.exception
    key = tour_settings(text_of(lang), False).key()
    record = cached("record", key)
    layer = models.most_varied_layer(record)
    merges = cached("tour_heads", (*key, layer))  # what the warm-up computes, under the step's key
    lab = models.head_merges(record, layer)
    row = models.most_varied_row(lab[9])
    assert at.radio(key="tour_heads_n_merged").value == 9
    (number,) = numbers(at)
    assert f"L{layer}" in number and f"{lab[9].distinct(row, merged=False)} " in number
    assert f"{lab[9].mean_distinct(merged=False):.1f}" in number and f"{lab[1].kept:.0%}" in number
    assert len(frames(chart(at, "tour_heads_figure"))) == 9  # every head's strongest key framed

    at.radio(key="tour_heads_n_merged").set_value(1).run()
    assert not at.exception
    (merged,) = numbers(at)
    assert merged != number and "576" in merged and f"{lab[1].kept:.0%}" in merged
    assert merges[1].kept == lab[1].kept < 1.0
    (frame,) = frames(chart(at, "tour_heads_figure"))  # one head: one frame round all nine rows, at its key
    top = int(lab[1].top[0, row])
    assert (frame["x0"], frame["x1"], frame["y0"], frame["y1"]) == (top - 0.5, top + 0.5, -0.5, 8.5)

    at.radio(key="tour_heads_n_merged").set_value(3).run()
    (three,) = numbers(at)
    assert "192" in three and f"{lab[3].kept:.0%}" in three and f"{lab[3].mean_distinct():.1f}" in three
    assert len(frames(chart(at, "tour_heads_figure"))) == 3


@pytest.mark.parametrize("lang", LANGS)
def test_kv_states_the_kv_cache_pages_bytes_and_the_what_if(smollm2, lang):
    at = tour_app("kv", lang)
    assert not at.exception
    key = tour_settings(text_of(lang), False).key()
    whatif = whatif_summary(cached("kv_whatif", (*key, 0)))  # the KV cache page's what-if key, layer 0
    cfg = models_cfg(at)
    assert at.radio(key="tour_kv_n_kv_head").value == 3
    own_bytes = estimate(cfg, 1, 8192, "bf16").total_bytes
    size, whatif_text = numbers(at)[:2]  # a third, the measured cache, where the KV cache page has measured it
    assert human_bytes(own_bytes) in size and f"{own_bytes:,}" in size
    mqa = whatif[whatif["n_kv_head"] == 1].iloc[0]
    assert f"{mqa['js_mean']:.3f}" in whatif_text and f"{mqa['output_change']:.1%}" in whatif_text
    curves = chart(at, "tour_kv_curves")["data"]
    bright = [trace["name"] for trace in curves if trace.get("opacity") != DIMMED_OPACITY]
    assert len(bright) == 2 and any("3" in name for name in bright)  # GQA's curve and the model as configured
    assert len(frames(chart(at, "tour_kv_grouping"))) == 1

    at.radio(key="tour_kv_n_kv_head").set_value(1).run()
    assert not at.exception
    mqa_bytes = estimate(replace(cfg, n_kv_head=1), 1, 8192, "bf16").total_bytes
    size, whatif_text = numbers(at)[:2]  # a third, the measured cache, where the KV cache page has measured it
    assert mqa_bytes * 3 == own_bytes and f"{mqa_bytes:,}" in size
    assert f"{mqa['js_worst_head']:.3f}" in whatif_text

    at.radio(key="tour_kv_n_kv_head").set_value(9).run()
    size, copies = numbers(at)[:2]
    assert f"{own_bytes * 3:,}" in size and "3" in copies

    if lang == "en":  # the real cache, measured as the KV cache page measures it (its key), on request
        if "tour_kv_measure" in [toggle.key for toggle in at.toggle]:  # not measured yet in this process
            at.toggle(key="tour_kv_measure").set_value(True).run()
        checks = cached("kv_measured", key)
        assert not at.exception and int(checks["error (bytes)"].abs().max()) == 0
        assert "within 0 bytes" in numbers(at)[-1] and len(numbers(at)) == 3
    if lang == "en":  # the page's own total for the tour model (its "sidebar model" config): the same bytes
        kv_page = page("pages/kv_cache.py", lang)
        kv_page.radio(key="kv_source").set_value("sidebar").run()
        assert not kv_page.exception
        assert human_bytes(own_bytes) in [m.value for m in kv_page.metric]


def models_cfg(at: AppTest):
    """The tour model's KV config, as the step reads it (kv_config_of on the loaded source)."""
    return kv_config_of(load_source(tour_spec()))


@pytest.mark.parametrize("lang", LANGS)
def test_tiling_equals_the_cost_pages_example_and_moves_with_the_block(lang):
    at = tour_app("tiling", lang)
    assert not at.exception
    assert at.slider(key="tour_tiling_block").value == 8
    example = tiling_example(24, 8, 0)
    (number,) = numbers(at)
    assert f"{example.max_difference:.1e}" in number and "4,608" in number
    framed = models.max_score_block(example.steps)
    (frame,) = frames(chart(at, "tour_tiling_figure"))
    assert (frame["x0"], frame["x1"]) == (example.steps[framed].block[0] - 0.5, example.steps[framed].block[1] - 0.5)

    at.slider(key="tour_tiling_block").set_value(3).run()
    (moved,) = numbers(at)
    small = tiling_example(24, 3, 0)
    assert moved != number and f"{small.max_difference:.1e}" in moved and f"{len(small.steps)} " in moved

    if lang == "en":  # the Cost page's tiling metric at the same block
        cost = page("pages/cost.py", lang)
        assert f"{example.max_difference:.1e}" in [m.value for m in cost.metric]


def test_heads_on_a_one_token_text_says_there_is_nothing_to_merge():
    at = tour_app("heads", "en", tour_text="own", text="Hi")
    assert not at.exception
    assert numbers(at) == [] and any("one token" in box.value for box in at.info)


def test_warm_computes_what_the_steps_draw_and_drawing_computes_nothing_more(monkeypatch):
    lang = "en"
    result_cache().clear()  # what the warm-up puts there, and nothing else
    for step, warm in (
        ("heads", tour_views.heads_warm),
        ("kv", tour_views.kv_warm),
        ("tiling", tour_views.tiling_warm),
    ):
        warm(tour_context(step, text_of(lang)))
    key = tour_settings(text_of(lang), False).key()
    layer = models.most_varied_layer(cached("record", key))
    cached("tour_heads", (*key, layer))
    cached("kv_whatif", (*key, 0))

    def no_compute(*args, **kwargs):
        raise AssertionError("a step recomputed what its warm-up made")

    assert cached("tour_heads_layer", key) == layer
    monkeypatch.setattr(tour_views.models, "head_merges", no_compute)
    monkeypatch.setattr(tour_views.models, "most_varied_layer", no_compute)
    monkeypatch.setattr(tour_views, "gqa_whatif", no_compute)
    for step in ("heads", "kv"):
        at = tour_app(step, lang)
        assert not at.exception and numbers(at)

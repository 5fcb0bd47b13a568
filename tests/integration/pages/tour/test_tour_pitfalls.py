"""The tour's pitfalls in AppTest: the table and four live steps in both languages, each chart with its mark, each
number moving with the step's setting to the lab's value, and equal to what the source page shows."""

import math
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from attnviz import settings
from attnviz.app.loading import result_cache
from attnviz.app.tour import pitfalls as view
from attnviz.app.tour.cache import tour_context
from attnviz.app.training_cache import finished
from attnviz.figures.tour import DIMMED_OPACITY, HIGHLIGHT_COLOR
from attnviz.i18n.message import render
from attnviz.labs import scaling
from attnviz.labs.cost import paths as cost
from attnviz.labs.masks.effects import leak_test
from attnviz.labs.tour import pitfalls as lab
from attnviz.labs.tour.steps import PITFALLS
from tests.integration.pages.tour.apptest import SMALL_TRAINING, numbers, small_trainings, tour_app
from tests.plotly_json import spec_of

ROOT = Path(__file__).resolve().parents[4]
SMALL = SMALL_TRAINING
STEPS = ("pitfalls", "pitfall_scale", "pitfall_memory", "pitfall_mask", "pitfall_collapse")
LANGS = ("en", "zh")


@pytest.fixture(autouse=True)
def small_training(monkeypatch):
    small_trainings(monkeypatch)


def ctx_for(step: str, lang: str):
    return tour_context(step, settings.EXAMPLES[settings.TOUR_EXAMPLES[lang]])


def charts(at) -> dict[str, dict]:
    return {chart.key: spec_of(chart) for chart in at.get("plotly_chart")}


def frames(spec: dict) -> list[dict]:
    return [s for s in spec["layout"].get("shapes", []) if s.get("line", {}).get("color") == HIGHLIGHT_COLOR]


def undimmed(spec: dict) -> set[str]:
    return {trace["name"] for trace in spec["data"] if trace.get("opacity", 1.0) != DIMMED_OPACITY}


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("step", STEPS)
def test_every_pitfall_step_draws_in_both_languages(step, lang):
    at = tour_app(step, lang)
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    said = numbers(at)
    assert len(said) == 1 and said[0]
    if lang == "zh":
        assert any("\u4e00" <= ch <= "\u9fff" for ch in said[0])  # said in Chinese, not the English fallback
    if step == "pitfalls":
        table = at.table[0].value  # a static table (its cells wrap), one row per pitfall by its title
        assert len(table) == len(PITFALLS)
        assert [b.key for b in at.button if b.key.startswith("tour_pitfalls_open_")] == [
            f"tour_pitfalls_open_{key}" for key in PITFALLS
        ]
    else:
        assert charts(at), "the step draws its chart"


def test_the_scale_step_is_the_training_pages_runs(count_trainings):
    at = tour_app("pitfall_scale", "en")
    assert not at.exception
    results = finished(view.training_config(ctx_for("pitfall_scale", "en")))
    assert results is not None and len(count_trainings) <= 1  # trained once (or earlier in this process), cached
    key = "tour_pitfall_scale_chart"
    assert numbers(at) == [render(lab.scale_number(results, "none"), "en")]
    assert undimmed(charts(at)[key]) == {"no scale"}
    for kind in ("sqrt_dmodel", "sqrt_dk"):
        at.radio(key="tour_pitfall_scale_scale").set_value(kind).run()
        assert numbers(at) == [render(lab.scale_number(results, kind), "en")]
        assert undimmed(charts(at)[key]) == {render(scaling.scale_titles()[kind], "en")}

    # the Training page with the same settings: served from the same cache, its table the same numbers
    page = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    page.switch_page("pages/training.py").run()
    for name, value in {
        "training_d_k": SMALL.head_dim,
        "training_steps": SMALL.steps,
        "training_seed": SMALL.seed,
    }.items():
        page.number_input(key=name).set_value(value)
    page.run()
    assert not page.exception and len(count_trainings) <= 1
    table = page.dataframe[0].value  # scale, factor, steps, loss, accuracy, steps to 90 %, ...
    for i, run in enumerate(results):
        assert table.iloc[i, 3] == run.final_loss and table.iloc[i, 4] == run.final_accuracy
        reached = table.iloc[i, 5]
        assert (None if pd.isna(reached) else int(reached)) == run.steps_to_target


def test_the_memory_step_fits_the_cost_pages_measurement():
    at = tour_app("pitfall_memory", "en")
    assert not at.exception
    found, rows = result_cache().lookup(("cost", ("cpu", cost.SIZES)))  # pages/cost.py's key
    assert found
    naive = lab.growth_exponent(rows, "naive")
    assert numbers(at) == [render(lab.memory_number(rows, "naive"), "en")] and f"n^{naive:.2f}" in numbers(at)[0]
    assert 1.5 < naive < 2.5  # the n x n matrices: quadratic, far from linear (and an exponential has no exponent)
    at.radio(key="tour_pitfall_memory_path").set_value("fused").run()
    assert numbers(at) == [render(lab.memory_number(rows, "fused"), "en")]
    assert lab.growth_exponent(rows, "fused") < naive - 0.5
    assert undimmed(charts(at)["tour_pitfall_memory_chart"]) == {render(cost.path_titles()["fused"], "en")}

    page = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    page.session_state["cost_done"] = True  # measured: the page draws it from the cache
    page.switch_page("pages/cost.py").run()
    assert not page.exception
    shown = page.dataframe[0].value  # path, tokens, seconds, peak_mb
    on_page = [{"path": r[0], "tokens": int(r[1]), "peak_mb": float(r[3])} for r in shown.itertuples(index=False)]
    assert lab.growth_exponent(on_page, "fused") == lab.growth_exponent(rows, "fused")


@pytest.mark.parametrize("lang", LANGS)
def test_the_mask_step_leaks_offset_by_one_and_not_aligned(lang):
    at = tour_app("pitfall_mask", lang)
    assert not at.exception
    ctx = ctx_for("pitfall_mask", lang)
    record = ctx.record()
    for align in ("plus_one", "right", "minus_one"):
        if align != view.MASK_DEFAULT:
            at.radio(key="tour_pitfall_mask_align").set_value(align).run()
        built, meant, key = view.mask_case(ctx, record.q_len, align)
        # the Mask lab's leak test, run directly: the tour's number is its number
        direct = leak_test(ctx.source, ctx.settings.text, view.mask_tokens(ctx), built.acting, meant)
        assert result_cache().lookup(("mask_leak", key))[0]  # under the Mask lab's key
        assert numbers(at) == [render(lab.leak_number(direct, built, meant), lang)]
        framed = set()  # the rows inside the frames: exactly the leaking ones
        for shape in frames(charts(at)["tour_pitfall_mask_mask"]):
            if shape["name"].startswith("tour_rows_"):
                framed.update(range(round(shape["y0"] + 0.5), round(shape["y1"] + 0.5)))
        assert framed == set(direct.leaked_rows)
        if align == "plus_one":
            assert len(direct.leaked_rows) == lab.decode_queries(record.q_len) - 1 and direct.max_change > 0
        else:
            assert direct.leaked_rows == []


def test_the_collapse_step_counts_the_heads_the_scaling_lab_counts():
    at = tour_app("pitfall_collapse", "en")
    assert not at.exception
    ctx = ctx_for("pitfall_collapse", "en")
    source = ctx.source
    record = result_cache().lookup(("record", ctx.settings.key(view.scaling_tokens(ctx))))[1]
    table = scaling.scaling_rows(record, source.d_model, source.head_dim).table()  # the Scaling page's table
    n_heads = record.n_layer * record.n_head
    none = view.none_multiple(source.head_dim)
    assert none == math.sqrt(source.head_dim)  # SmolLM2: 8 x 1/√64 is no scale at all
    unscaled = int((table["saturated_share_none"] >= lab.COLLAPSED_SHARE).sum())
    assert numbers(at) == [render(lab.collapse_number(unscaled, n_heads, none), "en")]
    fixed = int((table["saturated_share_sqrt_dk"] >= lab.COLLAPSED_SHARE).sum())
    at.select_slider(key="tour_pitfall_collapse_multiple").set_value(1.0).run()
    assert numbers(at) == [render(lab.collapse_number(fixed, n_heads, 1.0), "en")] and fixed < unscaled
    specs = charts(at)
    assert all(any(f["name"] == "tour_column_0" for f in frames(spec)) for spec in specs.values()) and len(specs) == 2
    found = lab.collapse(record)
    assert found.sinks > 0 and found.norm_ratio < 1  # a trained model's collapsed heads: sinks on a small value
    assert render(lab.collapse_finding(found), "en") in [m.value for m in at.markdown]


@pytest.mark.parametrize("lang", LANGS)
def test_the_table_reads_each_steps_finding_and_opens_its_step(lang):
    ctx = ctx_for("pitfalls", lang)
    for key in ("pitfall_scale", "pitfall_memory", "pitfall_mask", "pitfall_collapse"):
        view.VIEWS[key].warm(ctx)  # as the server's warm-up does
    at = tour_app("pitfalls", lang)
    assert not at.exception
    table = at.table[0].value  # indexed by the pitfall: symptom, cause, fix, finding
    findings = list(table.iloc[:, 3])
    for key in ("pitfall_scale", "pitfall_memory", "pitfall_mask", "pitfall_collapse"):
        assert findings[PITFALLS.index(key)] == view.VIEWS[key].row(ctx)
    assert "5 of the 5 pitfalls" in numbers(at)[0] if lang == "en" else "5 个" in numbers(at)[0]
    at.button(key="tour_pitfalls_open_pitfall_mask").click().run()
    assert at.query_params["step"] == ["pitfall_mask"] or at.query_params["step"] == "pitfall_mask"
    assert not at.exception and numbers(at)[0] == render(
        lab.leak_number(*_default_leak(ctx_for("pitfall_mask", lang))), lang
    )


def _default_leak(ctx):
    record = ctx.record()
    built, meant, key = view.mask_case(ctx, record.q_len, view.MASK_DEFAULT)
    return result_cache().lookup(("mask_leak", key))[1], built, meant


def test_the_readers_own_text_is_priced_before_it_is_computed():
    text = "A fresh sentence no other test captures, long enough for a decode step over a cache."
    at = tour_app("pitfall_mask", "en", tour_text="own", text=text)
    assert not at.exception and not at.error
    prices = [c.value for c in at.caption if c.value.startswith("Not computed yet: about")]
    assert len(prices) == 2  # the capture, then the leak test: each said before it ran
    assert "rows change when later tokens change" in numbers(at)[0]
    at.run()  # now computed: said no more
    assert not [c.value for c in at.caption if c.value.startswith("Not computed yet")]

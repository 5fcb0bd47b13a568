"""The tour's first steps (intuition, three steps, scale, code) in AppTest: each draws its chart with its mark in
both languages, its number moves with its setting to what the lab gives, and equals the page it comes from."""

import pytest
from streamlit.testing.v1 import AppTest

from attnviz import settings as limits
from attnviz.app.tour.cache import tour_settings
from attnviz.core.token_display import markdown_text
from attnviz.i18n.translate import set_language, t
from attnviz.labs import scaling
from attnviz.labs.tour import basics
from attnviz.models.record import short_text
from tests.integration.pages.tour.apptest import ROOT, cached, numbers, text_of, tour_app
from tests.plotly_json import spec_of

LANGS = ("en", "zh")


@pytest.fixture(scope="module", autouse=True)
def _smollm2(smollm2):
    """The tour model, placed where the app loads it from (the test cache's conversion)."""
    return smollm2


def record_of(lang: str):
    return cached("record", tour_settings(text_of(lang), False).key())


def shape_names(chart) -> list[str]:
    return [shape.get("name", "") for shape in spec_of(chart)["layout"].get("shapes", [])]


def frame_of(chart, name: str) -> dict:
    return next(shape for shape in spec_of(chart)["layout"]["shapes"] if shape.get("name") == name)


def page(path: str, lang: str, **widgets) -> AppTest:
    """``path`` on the tour model and the example's text, in ``lang``; ``widgets`` set (key -> value) after."""
    set_language(lang)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["lang"] = lang
    at.run()
    at.selectbox(key="model").set_value(limits.TOUR_MODEL).run()
    at.text_area(key="text").input(text_of(lang)).run()
    at.switch_page(path).run()
    for key, value in widgets.items():
        at.selectbox(key=key).set_value(value).run()
    assert not at.exception, at.exception
    return at


def ok(at: AppTest) -> list[str]:
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    said = numbers(at)
    assert len(said) == 1, said
    return said


@pytest.mark.parametrize("lang", LANGS)
def test_intuition_frames_the_query_row_and_tells_its_weights(lang):
    at = tour_app("intuition", lang)
    ok(at)
    record = record_of(lang)
    layer, head = basics.clear_head(record.statistics)
    assert at.selectbox(key="tour_intuition_layer").value == layer
    assert at.selectbox(key="tour_intuition_head").value == head
    chart = at.get("plotly_chart")[0]
    last = record.q_len - 1
    assert f"tour_row_{last}" in shape_names(chart)  # the default query, the last token, framed
    at.selectbox(key="tour_intuition_query").set_value(2).run()
    (said,) = ok(at)
    weights, mask = record.weights(layer, head), record.mask(layer)
    story = basics.row_story(weights, 2, mask)
    top_key = story.top[0][0]
    frame = frame_of(at.get("plotly_chart")[0], "tour_row_2")
    assert (frame["y0"], frame["y1"]) == (1.5, 2.5)
    assert f"tour_cell_2_{top_key}" in shape_names(at.get("plotly_chart")[0])
    row = spec_of(at.get("plotly_chart")[1])  # the row on its own, its heaviest key marked
    assert [shape["x0"] for shape in row["layout"]["shapes"]] == [top_key]
    for k, w in story.top:
        assert t("tour_step.intuition.key", token=markdown_text(short_text(record.tokens[k].text)), weight=w) in said
    assert f"{story.total:.3f}" in said and f"L{layer}" in said


@pytest.mark.parametrize("lang", LANGS)
def test_three_steps_follow_one_row_and_reproduce_the_walkthrough_page(lang):
    at = tour_app("three_steps", lang)
    (first,) = ok(at)
    record = record_of(lang)
    layer, head = basics.clear_head(record.statistics)
    walk_key = (*tour_settings(text_of(lang), False).key(min(limits.MAX_TOKENS.default, limits.PARITY_TOKENS)), layer)
    walk = cached("walkthrough", walk_key)
    query = len(walk.tokens) - 1
    n = basics.sub_step_numbers(walk, head, query)
    assert f"{n.raw_low:.2f}" in first and f"{n.raw_high:.2f}" in first
    previous = first
    for sub in ("scale", "softmax", "weighted"):
        at.radio(key="tour_three_steps_sub").set_value(sub).run()
        (said,) = ok(at)
        assert said != previous  # the number moves with the sub-step
        previous = said
        assert f"tour_row_{query}" in shape_names(at.get("plotly_chart")[0])  # the same row on every sub-step
        if sub == "scale":
            assert f"{n.scaled_low:.2f}" in said and f"{n.scaled_high:.2f}" in said
        elif sub == "softmax":
            assert f"{n.max_weight:.2f}" in said
        else:
            assert f"{n.out_norm:.2f}" in said
    # the parity the tour states is the Walkthrough page's, on the same layer
    walkthrough = page("pages/walkthrough.py", lang, walk_layer=layer)
    assert walkthrough.metric[0].value == f"{walk.output_diff:.1e}"
    assert (
        t("tour_step.three_steps.parity", output_diff=walk.output_diff, weights_diff=walk.weights_diff, layer=layer)
        in previous
    )


@pytest.mark.parametrize("lang", LANGS)
def test_scale_counts_equal_the_scaling_page_and_move_with_the_multiple(lang):
    at = tour_app("scale", lang)
    (first,) = ok(at)
    charts = at.get("plotly_chart")
    assert len(charts) == 2  # the overview and the gradient
    key = tour_settings(text_of(lang), False).key()
    rows = cached("scaling", key)
    heads = rows.table(scaling.SATURATED)
    layer, head = basics.scale_head(heads)
    assert {f"tour_cell_{layer}_{head}"} == set(shape_names(charts[0]))  # framed in each of the three panels
    assert len(shape_names(charts[0])) == 3
    counts = basics.collapsed_counts(heads)
    stated = t(
        "tour_step.scale.number",
        none=counts["none"],
        sqrt_dk=counts["sqrt_dk"],
        n_heads=counts["n_heads"],
        threshold=scaling.SATURATED,
    )
    assert first.startswith(stated)
    # the Scaling page's own table of the same text and model gives the same counts
    scaling_page = page("pages/scaling.py", lang)
    table = scaling_page.dataframe[0].value  # the lab's columns, in every language (the page names no headers)
    assert len(table) == counts["n_heads"]
    assert int((table["saturated_share_none"] >= basics.HALF).sum()) == counts["none"]
    assert int((table["saturated_share_sqrt_dk"] >= basics.HALF).sum()) == counts["sqrt_dk"]
    # the multiple moves the number, to what the lab gives at that multiple
    record = cached("record", key)
    factor = rows.factors["sqrt_dk"]
    for multiple in (8.0, 0.0625):
        at.select_slider(key="tour_scale_multiple").set_value(multiple).run()
        (said,) = ok(at)
        assert said != first
        stats = scaling.head_row_stats(record, layer, head, factor * multiple, scaling.SATURATED)
        curve = scaling.gradient_curve(record, layer, head, [multiple])
        assert said.startswith(stated)
        assert f"{stats['saturated_share']:.0%}" in said and f"{curve.vanishing_share[0]:.0%}" in said
        gradient = spec_of(at.get("plotly_chart")[1])
        assert any(shape.get("x0") == multiple for shape in gradient["layout"]["shapes"])  # the multiple marked


@pytest.mark.parametrize("lang", LANGS)
def test_code_shows_each_steps_shapes_and_the_dimension_it_changes(lang):
    at = tour_app("code", lang)
    (first,) = ok(at)
    record = record_of(lang)
    layer, _ = basics.clear_head(record.statistics)
    walk_key = (*tour_settings(text_of(lang), False).key(min(limits.MAX_TOKENS.default, limits.PARITY_TOKENS)), layer)
    walk = cached("walkthrough", walk_key)
    T = len(walk.tokens)
    assert at.code and "def " in at.code[0].value
    split = (1, walk.n_head, T, walk.head_dim)
    assert str(split) in first and f"{walk.output_diff:.1e}" in first
    assert any(f"1, **{walk.n_head}**, {T}, **{walk.head_dim}**" in m.value for m in at.markdown)  # changed in bold
    at.select_slider(key="tour_code_part").set_value("merge").run()
    (said,) = ok(at)
    assert str((1, T, walk.n_head * walk.head_dim)) in said and said != first


LONG = "注意力机制让每个词都能看到句子里的其他词。 The trophy did not fit in the suitcase because it was too big. " * 4


@pytest.mark.parametrize("step", ["intuition", "three_steps", "scale", "code"])
def test_own_text_one_token_and_the_longest(step):
    one = tour_app(step, "zh", tour_text="own", text="Hi")
    assert not one.exception, one.exception
    assert not one.error, [e.value for e in one.error]
    if step == "code":  # one token still has every shape: (1, 9, 1, 64)
        assert "(1, 9, 1, 64)" in numbers(one)[0]
    else:  # nothing to weigh: said, no chart
        assert t("tour_basics.one_token") in [box.value for box in one.info] and not numbers(one)
        assert not one.get("plotly_chart")
    long = tour_app(step, "en", tour_text="own", text=LONG)
    (said,) = ok(long)
    record = cached("record", tour_settings(LONG, True).key())
    assert record.q_len == limits.TOUR_TOKENS  # the reader's text, cut to the tour's limit
    if step == "intuition":  # the price is said before the pass, on the first step that runs it
        assert any(c.value == t("tour.price", time="2 s", n=limits.TOUR_TOKENS) for c in long.caption)
    if step == "code":
        assert f", {limits.TOUR_TOKENS}, " in said


def test_warm_computes_what_each_step_draws(monkeypatch):
    """After each step's warm-up, drawing it at its default setting runs no model and recomputes nothing."""
    from attnviz.app.tour import basics as views_module
    from attnviz.app.tour.cache import tour_context

    name = "English: pronouns"  # an example no other test here draws first
    for step in ("intuition", "three_steps", "scale", "code"):
        ctx = tour_context(step, limits.EXAMPLES[name])
        views_module.VIEWS[step].warm(ctx)

    def computed(*args, **kwargs):
        raise AssertionError("drawn from the warm-up, nothing is computed")

    monkeypatch.setattr(views_module, "walk_source", computed)
    monkeypatch.setattr(scaling, "scaling_rows", computed)
    monkeypatch.setattr(scaling, "gradient_curve", computed)
    monkeypatch.setattr(type(ctx.source), "run", computed)
    for step in ("intuition", "three_steps", "scale", "code"):
        at = tour_app(step, "en", tour_text=name)
        ok(at)

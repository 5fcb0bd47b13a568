"""Every page on a model of each route: the eager route (Falcon, BLOOM: their own attention, full weights) and
learned sinks (gpt-oss), as a user's local folders (tiny random models of the zoo, tests/integration/zoo/build.py)."""

import pytest
from streamlit.testing.v1 import AppTest

from tests.grid_canvas import has_grid
from tests.integration.pages.test_app import ROOT
from tests.integration.zoo.build import build_zoo, zoo_dir
from tests.plotly_json import spec_of

PAGES = [
    "heads", "tokens", "head_roles", "generation", "padding", "masks", "scaling", "parity", "walkthrough",
    "kv_cache", "overview",
]  # fmt: skip
TEXT = "The cat sat on the mat because it was tired, and the dog slept."


@pytest.fixture(scope="module")
def folders():
    statuses = build_zoo(["falcon", "bloom", "gpt_oss"])
    assert all(s["status"] == "built" for s in statuses.values()), statuses
    return {name: str(zoo_dir() / name) for name in statuses}


def app_on(folder: str, page: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.selectbox(key="model").set_value("path").run()
    at.text_input(key="model_path").input(folder).run()
    at.text_area(key="text").input(TEXT).run()
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception, (page, at.exception)
    assert not at.error, (page, [e.value for e in at.error])
    return at


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("model", ["falcon", "bloom"])
def test_every_page_runs_on_the_eager_route_and_says_what_it_cannot_do(folders, model, page):
    at = app_on(folders[model], page)
    said = [i.value for i in at.info] + [c.value for c in at.caption]
    if page in ("masks", "scaling", "parity"):  # these recompute attention from q and k: the route has none
        assert any("does not call transformers' AttentionInterface" in text for text in said), said
    if page == "heads":
        assert any("its own eager attention (output_attentions=True)" in c.value for c in at.caption)
        assert any("at most" in text and "no q and k" in text for text in said)
        assert at.get("plotly_chart") and has_grid(at)  # the grid is the page's own canvas


def test_the_heads_page_shows_the_learned_sink_as_a_statistic_and_a_column(folders):
    at = app_on(folders["gpt_oss"], "heads")
    assert any("learned attention sinks" in c.value for c in at.caption)
    heatmaps = [spec_of(c) for c in at.get("plotly_chart")]
    columns = [list(d.get("x") or []) for s in heatmaps for d in s["data"] if d.get("type") == "heatmap"]
    assert any(xs and xs[-1] == "⟂ learned sink" for xs in columns)
    assert "sink_weight" in at.dataframe[0].value.columns
    assert "sink_weight" in at.selectbox(key="heads_metric").options

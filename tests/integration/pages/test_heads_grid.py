"""The Heads page's grid as navigation: hover flags, grey masked bins, filters and sorting, links and clicks."""

from pathlib import Path

import numpy as np
import torch
from streamlit.testing.v1 import AppTest

from attnviz.figures.heads import MASKED_LEVEL, grid_view, make_head_grid_figure, selected_tile
from tests.plotly_json import decode, spec_of

ROOT = Path(__file__).resolve().parents[3]


def heads_page(**query) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    at.switch_page("pages/heads.py")
    for name, value in query.items():
        at.query_params[name] = value
    return at.run()


def grid_spec(at: AppTest) -> dict:
    return spec_of(at.get("plotly_chart")[0])


def tiles(spec: dict) -> dict:
    """The grid's one-point-per-tile trace, its text and customdata as (n_layer, n_col) lists."""
    trace = next(t for t in spec["data"] if t.get("name") == "tiles")
    n_col = len(spec["layout"]["xaxis"]["ticktext"])
    rows = lambda v: [v[i : i + n_col] for i in range(0, len(v), n_col)]  # noqa: E731
    return {"text": rows(trace["text"]), "customdata": rows(trace["customdata"])}


def test_the_grid_has_one_hover_text_per_tile_with_flags():
    at = heads_page()
    assert not at.exception
    spec = grid_spec(at)
    tile_trace = tiles(spec)
    text = tile_trace["text"]
    assert len(text) == 2 and len(text[0]) == 5  # the embedded default: 2 layers x (4 heads + mean)
    assert text[1][2].startswith("L1 H2") and text[0][4] == "L0 mean over heads"
    assert tile_trace["customdata"][1][2] == [1, 2]
    table = at.dataframe[0].value
    for row in table.itertuples():
        assert text[row.layer][row.head] == f"L{row.layer} H{row.head}" + (f"<br>{row.flags}" if row.flags else "")


def test_hover_lists_each_heads_flags():
    maps = torch.eye(4).expand(1, 2, 4, 4).clone()  # (1, 2, 4, 4)
    flags = np.array([["sink, previous-token", ""]], dtype=object)
    text = tiles(spec_of(make_head_grid_figure(maps, flags=flags)))["text"]
    assert text[0] == ["L0 H0<br>sink, previous-token", "L0 H1", "L0 mean over heads"]


def test_masked_future_bins_get_the_grey_level_for_a_causal_model():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    at.checkbox(key="causal").check().run()
    at.switch_page("pages/heads.py").run()
    assert not at.exception
    spec = grid_spec(at)
    z = decode(spec["data"][0]["z"])
    tile = len(z) // 2  # 2 layers of square tiles
    first = z[:tile, :tile]
    assert (first[np.triu_indices(tile, 1)] == MASKED_LEVEL).all()
    assert (first[np.tril_indices(tile)] < MASKED_LEVEL).all()
    assert spec["data"][0]["colorscale"][-1][1] == "#d4d4d4"


def test_filtering_to_sink_heads_leaves_only_flagged_heads():
    at = heads_page()
    at.selectbox(key="heads_grid_show").set_value("only heads flagged sink").run()
    assert not at.exception
    import pandas as pd

    stats = pd.DataFrame(
        {"layer": [0, 0, 1, 1], "head": [0, 1, 0, 1], "flags": ["sink", "", "sink, previous-token", "uniform"]}
    )
    view = grid_view(stats, 2, 2, "only heads flagged sink")
    assert view["shown"].tolist() == [[True, False], [True, False]]
    spec = spec_of(make_head_grid_figure(torch.rand(2, 2, 4, 4), **view))
    dimmed = [s for s in spec["layout"]["shapes"] if s.get("fillcolor")]
    assert len(dimmed) == 1 and dimmed[0]["path"].count("Z") == 2  # the two unflagged heads
    text = tiles(spec)["text"]
    assert "dimmed" in text[0][1] and "dimmed" not in text[0][0]
    assert any("flagged sink:" in c.value for c in at.caption)


def test_sorting_keeps_the_click_target_on_the_right_head():
    import pandas as pd

    stats = pd.DataFrame({"layer": [0, 0, 0], "head": [0, 1, 2], "flags": [""] * 3, "entropy": [0.1, 0.9, 0.5]})
    view = grid_view(stats, 1, 3, "sorted by entropy")
    assert view["order"].tolist() == [[1, 2, 0]]
    maps = torch.arange(3.0).view(1, 3, 1, 1).expand(1, 3, 2, 2) / 4  # head h is the constant h / 4
    spec = spec_of(make_head_grid_figure(maps, **view))
    trace = tiles(spec)
    assert [c[1] for c in trace["customdata"][0]] == [1, 2, 0, "mean"]
    z = decode(spec["data"][0]["z"])
    assert z[0, 0] == round(255 * 0.25) and z[0, 2] == round(255 * 0.5) and z[0, 4] == 0
    assert spec["layout"]["xaxis"]["ticktext"][:3] == ["#1", "#2", "#3"]
    assert selected_tile({"selection": {"points": [{"customdata": trace["customdata"][0][0]}]}}) == (0, 1)
    at = heads_page()
    at.selectbox(key="heads_grid_show").set_value("sorted by entropy").run()
    assert not at.exception


def test_a_link_opens_its_head_and_the_page_keeps_the_link_current():
    at = heads_page(layer="1", head="2")
    assert not at.exception
    assert at.selectbox(key="heads_layer").value == 1 and at.selectbox(key="heads_head").value == 2
    assert "L1 H2" in spec_of(at.get("plotly_chart")[1])["layout"]["title"]["text"]
    at.selectbox(key="heads_head").set_value("mean").run()
    assert at.query_params["layer"] == "1" and at.query_params["head"] == "mean"


def test_bad_link_parameters_are_ignored_with_a_caption():
    for layer, head in [("7", "0"), ("x", "1"), ("0", "99"), ("-1", "0"), ("1", "<b>")]:
        at = heads_page(layer=layer, head=head)
        assert not at.exception, (layer, head)
        assert at.selectbox(key="heads_layer").value == 0 and at.selectbox(key="heads_head").value == 0
        assert any("ignored" in c.value for c in at.caption), (layer, head)


def test_a_click_on_a_tile_opens_that_head():
    at = heads_page()
    at.session_state["heads_grid"] = {"selection": {"points": [{"customdata": [1, 3], "x": 0, "y": 0}]}}
    at.run()
    assert not at.exception
    assert at.selectbox(key="heads_layer").value == 1 and at.selectbox(key="heads_head").value == 3
    assert at.query_params["layer"] == "1" and at.query_params["head"] == "3"
    at.selectbox(key="heads_head").set_value(0).run()  # the same selection does not take the picker back
    assert at.selectbox(key="heads_head").value == 0


def test_selected_tile_reads_customdata_and_ignores_anything_else():
    assert selected_tile({"selection": {"points": [{"customdata": [2, "mean"]}]}}) == (2, "mean")
    assert selected_tile({"selection": {"points": []}}) is None
    assert selected_tile(None) is None
    assert selected_tile({"selection": {"points": [{"x": 3}]}}) is None

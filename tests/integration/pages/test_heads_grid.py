"""The Heads page's grid as navigation: hover flags, grey masked bins, filters and sorting, links and clicks.

The page draws the grid on its own canvas (attnviz.app.grid_canvas) from the picture its component is sent:
read here from the component's data; the Plotly figure it exports is :func:`make_head_grid_figure`'s."""

from pathlib import Path

import numpy as np
import torch
from streamlit.testing.v1 import AppTest

from attnviz.app.grid_canvas import clicked_tile
from attnviz.figures.heads import MASKED_LEVEL, grid_view, make_head_grid_figure, selected_tile
from tests.grid_canvas import grid_data, grid_levels, grid_palette_of
from tests.plotly_json import decode, spec_of

ROOT = Path(__file__).resolve().parents[3]


def heads_page(**query) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    at.switch_page("pages/heads.py")
    for name, value in query.items():
        at.query_params[name] = value
    return at.run()


def large_view(at: AppTest) -> dict:
    """The large view's figure: the page's first Plotly chart (the grid is no Plotly chart)."""
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
    data = grid_data(at)
    hover = data["hover"]
    assert len(hover) == 2 and len(hover[0]) == 5  # the embedded default: 2 layers x (4 heads + mean)
    assert hover[1][2][0] == "L1 H2" and hover[0][4] == ["L0 mean over heads"]
    assert data["heads"][1][2] == [1, 2] and data["heads"][0][4] == [0, "mean"]
    assert data["hint"].startswith("Click")
    table = at.dataframe[0].value
    for row in table.itertuples():
        assert hover[row.layer][row.head] == [f"L{row.layer} H{row.head}"] + ([row.flags] if row.flags else [])
    assert "L0 H0" in large_view(at)["layout"]["title"]["text"]  # AppTest has no browser: no chart waits
    assert data["report_drawn"] is False


def test_a_browsers_first_map_holds_the_charts_until_it_is_drawn(monkeypatch):
    from attnviz.app import grid_canvas

    monkeypatch.setattr(grid_canvas, "_in_a_browser", lambda: True)  # a session a browser runs
    at = heads_page()
    assert not at.exception and len(at.get("plotly_chart")) == 2  # `streamlit run app.py`: no chart waits
    assert grid_data(at)["report_drawn"] is False
    monkeypatch.setattr(grid_canvas, "_WAIT_FOR_MAP", True)  # serve.py's warm-up: wait_for_first_map()
    at = heads_page()
    assert not at.exception
    assert grid_data(at)["report_drawn"] is True  # the canvas says when it has drawn: that run has the charts
    assert not at.get("plotly_chart")  # no Plotly before the map: the large view and the statistics' chart wait
    follows = [c for c in at.caption if c.value == "The chart follows the map above."]
    assert len(follows) == 2
    assert at.dataframe[0].value is not None  # what is no Plotly chart is drawn at once
    at.session_state["_grid_canvas_drawn"] = True  # what the canvas's report sets (its browser test clicks it)
    at.run()
    assert grid_data(at)["report_drawn"] is False and len(at.get("plotly_chart")) == 2


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
    data = grid_data(at)
    z = grid_levels(data)
    tile = data["th"]
    assert z.shape == (2 * tile, 5 * data["tw"]) and tile == data["tw"]  # 2 layers of square tiles
    first = z[:tile, :tile]
    assert (first[np.triu_indices(tile, 1)] == MASKED_LEVEL).all()
    assert (first[np.tril_indices(tile)] < MASKED_LEVEL).all()
    assert tuple(grid_palette_of(data)[MASKED_LEVEL]) == (0xD4, 0xD4, 0xD4)  # drawn grey


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
    sinks = {(r.layer, r.head) for r in at.dataframe[0].value.itertuples() if "sink" in str(r.flags).split(", ")}
    page_dimmed = grid_data(at)["dimmed"]
    assert {(layer, head) for layer in range(2) for head in range(4) if not page_dimmed[layer][head]} == sinks
    assert not any(row[4] for row in page_dimmed)  # the mean column is never dimmed


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
    table = at.dataframe[0].value  # each layer's heads, highest entropy first: the click target follows the head
    for layer, row in enumerate(grid_data(at)["heads"]):
        entropy = table[table.layer == layer].set_index("head")["entropy"]
        heads = [head for _, head in row[:-1]]
        assert sorted(heads) == list(range(4)) and list(entropy[heads]) == sorted(entropy, reverse=True)
    assert grid_data(at)["cols"][:4] == ["#1", "#2", "#3", "#4"]


def test_a_link_opens_its_head_and_the_page_keeps_the_link_current():
    at = heads_page(layer="1", head="2")
    assert not at.exception
    assert at.selectbox(key="heads_layer").value == 1 and at.selectbox(key="heads_head").value == 2
    assert "L1 H2" in large_view(at)["layout"]["title"]["text"]
    at.selectbox(key="heads_head").set_value("mean").run()
    assert at.query_params["layer"] == "1" and at.query_params["head"] == "mean"


def test_bad_link_parameters_are_ignored_with_a_caption():
    for layer, head in [("7", "0"), ("x", "1"), ("0", "99"), ("-1", "0"), ("1", "<b>")]:
        at = heads_page(layer=layer, head=head)
        assert not at.exception, (layer, head)
        assert at.selectbox(key="heads_layer").value == 0 and at.selectbox(key="heads_head").value == 0
        assert any("ignored" in c.value for c in at.caption), (layer, head)


def test_a_click_on_a_tile_opens_that_head():
    # the click itself happens in a browser (tests/integration/browser/test_browser_grid.py); here what it sends
    assert clicked_tile([1, 3]) == (1, 3) and clicked_tile([2, "mean"]) == (2, "mean")
    for value in (None, [], [1], "1,3", [1, 2, 3], ["x", 1]):
        assert clicked_tile(value) is None, value


def test_selected_tile_reads_customdata_and_ignores_anything_else():
    assert selected_tile({"selection": {"points": [{"customdata": [2, "mean"]}]}}) == (2, "mean")
    assert selected_tile({"selection": {"points": []}}) is None
    assert selected_tile(None) is None
    assert selected_tile({"selection": {"points": [{"x": 3}]}}) is None

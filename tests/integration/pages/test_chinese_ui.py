"""The whole UI in Chinese: every page, opened in 中文, shows no English sentence the catalogue should have held.

What counts as English left: three or more English words in a row (a sentence or a label), outside code spans,
model names and the technical names the Chinese text keeps as they are (softmax, RoPE, d_model …). Text the user
typed is data and is not checked (the text here is Chinese). Widget labels, headings, captions, Markdown, alerts,
table headers, the charts' titles and axis titles, and the Heads grid's name, column names and hover text are all
read.
"""

import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from attnviz.i18n.translate import set_language
from attnviz.models.hf.bundled import BUNDLED
from tests.grid_canvas import grid_data, has_grid

ROOT = Path(__file__).resolve().parents[3]
PAGES = sorted(p.name for p in (ROOT / "pages").glob("*.py"))
# pages whose tabs run one at a time (attnviz.app.widgets.tab_picker): the picker's key and the tabs after the first
TABS = {
    "patching.py": ("patching_tab", ["patching.tab_logits"]),
    "kv_cache.py": ("kv_tab", ["kv_ui.tab_speed", "kv_ui.tab_whatif"]),
}
SENTENCE = re.compile(r"[A-Za-z][a-z]+(?:[ \-'’][A-Za-z][a-z]*){2,}")
KEPT = [title for bundled in BUNDLED.values() for title in (bundled.title,)]


def visible_texts(at: AppTest) -> list[str]:
    texts = []
    for kind in ("title", "header", "subheader", "caption", "markdown", "info", "warning", "error", "success"):
        texts += [element.value for element in getattr(at, kind)]
    for kind in (
        "selectbox",
        "slider",
        "select_slider",
        "toggle",
        "button",
        "number_input",
        "text_area",
        "text_input",
        "radio",
        "multiselect",
        "checkbox",
        "expander",
        "tabs",
    ):
        for element in getattr(at, kind):
            texts += [getattr(element, "label", ""), getattr(element, "help", "") or ""]
    for chart in at.get("plotly_chart"):
        layout = json.loads(chart.proto.spec)["layout"]
        for name, axis in layout.items():
            if isinstance(axis, dict) and (name.startswith(("xaxis", "yaxis")) or name == "title"):
                title = axis.get("title", axis) if name != "title" else axis
                texts.append(title.get("text", "") if isinstance(title, dict) else str(title))
    for frame in at.dataframe:
        texts += [str(c) for c in frame.value.columns]
    if has_grid(at):  # the Heads page's grid, on its own canvas: its name, columns and every tile's hover lines
        grid = grid_data(at)
        texts += [
            grid["label"],
            grid["hint"],
            *grid["cols"],
            *(line for row in grid["hover"] for tile in row for line in tile),
        ]
    return [t for t in texts if t]


def english_left(text: str) -> list[str]:
    text = re.sub(r"`[^`]*`", " ", text)  # code
    text = re.sub(r"https?://[^\s)\]]+", " ", text)  # links
    for kept in KEPT:
        text = text.replace(kept, " ")
    return SENTENCE.findall(text)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_in_chinese_has_no_english_sentence_left(page):
    set_language("zh")  # AppTest formats the options in this thread, as the session's run did
    try:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        at.query_params["lang"] = "zh"
        at.run()
        at.text_area(key="text").input("猫坐在垫子上，因为它累了。").run()
        at.switch_page(f"pages/{page}").run()
        assert not at.exception, at.exception
        texts = visible_texts(at)
        picker, others = TABS.get(page, ("", []))
        for tab in others:  # a tab's code runs only while it is open: each read in turn
            at.radio(key=picker).set_value(tab).run()
            assert not at.exception, at.exception
            texts += visible_texts(at)
        left = {text[:120]: english_left(text) for text in texts if english_left(text)}
        assert not left, left
    finally:
        set_language("en")


RAW_NAMES = re.compile(
    r"\b(entropy_norm|entropy|max_weight|first_token_weight|prev_token_weight|self_weight|"
    r"mean_distance|sink_weight|uniform|saturated|sink|previous-token|flags|layer|head)\b"
)
CJK = re.compile(r"[\u4e00-\u9fff]")


def test_the_heads_page_in_chinese_names_its_statistics_and_flags_and_writes_chinese_axis_titles_across():
    set_language("zh")
    try:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        at.query_params["lang"] = "zh"
        at.run()
        at.switch_page("pages/heads.py").run()
        assert not at.exception, at.exception
        frame = at.dataframe[0].value
        assert list(frame.columns)[:4] == ["层", "头", "熵", "归一化熵"]
        shown = [*frame.columns, *(f for cell in frame["标记"] for f in str(cell).split(", ") if f)]
        shown += list(at.selectbox(key="heads_metric").options)  # the picker's labels, as the browser shows them
        grid = grid_data(at)  # the grid's canvas: each tile's flags, one hover line under its head
        shown += [
            *grid["cols"],
            *(f for row in grid["hover"] for tile in row for line in tile[1:] for f in line.split(", ")),
        ]
        at.selectbox(key="heads_metric").set_value("entropy_norm").run()
        for chart in at.get("plotly_chart"):
            spec = json.loads(chart.proto.spec)
            shown += [(trace.get("colorbar") or {}).get("title", {}).get("text", "") for trace in spec["data"]]
            for name, axis in spec["layout"].items():
                if name.startswith("yaxis"):
                    assert not CJK.search(str((axis.get("title") or {}).get("text", ""))), (
                        name,
                        axis,
                    )  # not on its side
        raw = [text for text in shown if text and RAW_NAMES.fullmatch(str(text))]
        assert not raw, raw
        assert "归一化熵" in shown  # the statistic's colour bar, named
    finally:
        set_language("en")

"""The Overview, Parity, Generation, Padding and Cost pages in English and 中文, and two bugs of theirs:

- the Overview's token caption is Markdown, so a token such as ``__init__`` must reach it escaped;
- the Generation page's notice about a cut prompt must be true whether **Max tokens** leaves room for the
  tokens to generate or not, and the page must say when prompt and continuation run past **Max tokens**.
"""

import re
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from attnviz.core.head_stats import STAT_COLUMNS, describe_flags
from attnviz.figures.base import make_head_heatmap_figure
from attnviz.figures.cost import make_cost_figure, make_tiling_figure
from attnviz.figures.heads import grid_show_labels, grid_show_options, make_pooled_head_figure
from attnviz.i18n.translate import set_language, tr
from attnviz.labs.cost.paths import path_titles, tiling_example
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.models.hf.parity import BUGS, bug_title
from pages.widgets.heads import grid_figure
from tests.plotly_json import spec_of

ROOT = Path(__file__).resolve().parents[3]
UNESCAPED_MARKUP = re.compile(r"(?<!\\)(__|\*\*|<b>)")


@pytest.fixture
def zh():
    """Speak Chinese in this thread too: AppTest calls a widget's format_func here, not in the script's thread."""
    set_language("zh")
    yield
    set_language("en")


def app(lang: str = "en", **widgets) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["lang"] = lang
    at.run()
    for key, value in widgets.items():
        if key == "model":
            at.selectbox(key="model").set_value(value)
        elif key == "max_tokens":
            at.number_input(key="max_tokens").set_value(value)
        elif key == "text":
            at.text_area(key="text").input(value)
    return at.run()


@pytest.mark.parametrize(("lang", "prefix"), [("en", "Tokens: "), ("zh", "词元：")])
def test_overview_token_caption_shows_markup_in_tokens_as_typed(lang, prefix, request):
    if lang == "zh":
        request.getfixturevalue("zh")
    at = app(lang, text="def __init__(self): **bold** <b>x</b>")
    at.switch_page("pages/overview.py").run()
    assert not at.exception
    caption = next(c.value for c in at.caption if c.value.startswith(prefix))
    assert r"\_\_init\_\_" in caption and r"\*" in caption and r"\<" in caption
    assert not UNESCAPED_MARKUP.search(caption), caption
    model = next(c.value for c in at.caption if c.value.startswith(("Model: **", "模型：**")))
    assert r"n\_head=4" in model  # the model's name, escaped inside the bold


def generation(lang: str, max_tokens: int, n_new: int, text: str) -> AppTest:
    at = app(lang, model="smollm2", max_tokens=max_tokens, text=text)
    at.switch_page("pages/generation.py").run()
    at.slider(key="gen_new").set_value(n_new).run()
    assert not at.exception, at.exception
    return at


def read_and_generated(at: AppTest) -> tuple[int, int]:
    """Prompt tokens read and tokens generated, from the chart of generated rows ("5 ✦Paris" is row 5)."""
    rows = spec_of(at.get("plotly_chart")[0])["data"][0]["y"]
    return int(rows[0].split()[0]), len(rows)


TEN = "one two three four five six seven eight nine ten"  # 10 SmolLM2 tokens


def test_generation_notice_when_max_tokens_leaves_room_for_the_new_tokens():
    at = generation("en", max_tokens=16, n_new=12, text=TEN)
    n_prompt, n_generated = read_and_generated(at)
    assert n_prompt == 4 and n_prompt + n_generated <= 16
    (warning,) = [w.value for w in at.warning]
    assert "The prompt has 10 tokens; the model read only its last 4, so that prompt plus 12 new tokens fit in 16" in (
        warning
    )
    assert not any("more than **Max tokens**" in c.value for c in at.caption)


def test_generation_notice_when_max_tokens_is_smaller_than_the_tokens_to_generate():
    at = generation("en", max_tokens=16, n_new=20, text=TEN)
    n_prompt, n_generated = read_and_generated(at)
    assert n_prompt == 1  # no room: the model still reads one prompt token
    (warning,) = [w.value for w in at.warning]
    assert "the model read only its last 1:" in warning and "leaves no room for more of it beside the 20" in warning
    assert "fit in" not in warning  # the old notice claimed prompt plus 20 new tokens fit in 16
    past = [c.value for c in at.caption if "more than **Max tokens** (16)" in c.value]
    assert (len(past) == 1) == (n_prompt + n_generated > 16)
    if past:
        assert past[0].startswith(f"Prompt and continuation make {n_prompt + n_generated} tokens")


def test_generation_has_no_notice_when_max_tokens_holds_prompt_and_new_tokens():
    at = generation("en", max_tokens=64, n_new=12, text=TEN)
    n_prompt, _ = read_and_generated(at)
    # SmolLM2 continues the count with " ten" again and again, which the page names (attnviz/app/weights_note.py);
    # no other warning: none about what Max tokens left out
    assert n_prompt == 10
    assert all(w.value.startswith("**The model repeated one token") for w in at.warning), [w.value for w in at.warning]
    assert not any("Max tokens" in c.value for c in at.caption)


def test_generation_says_when_a_whole_one_token_prompt_and_its_continuation_pass_max_tokens():
    at = generation("en", max_tokens=4, n_new=8, text="Hello")
    n_prompt, n_generated = read_and_generated(at)
    assert n_prompt == 1 and not at.warning  # nothing of the prompt was cut
    past = [c.value for c in at.caption if "more than **Max tokens** (4)" in c.value]
    assert (len(past) == 1) == (n_prompt + n_generated > 4)


def test_generation_notices_in_chinese(zh):
    at = generation("zh", max_tokens=16, n_new=12, text=TEN)
    (warning,) = [w.value for w in at.warning]
    assert "提示词有 10 个词元；模型只读取了最后 4 个" in warning and "16" in warning
    at.slider(key="gen_new").set_value(20).run()
    (warning,) = [w.value for w in at.warning]
    assert "只读取了最后 1 个" in warning and "没有余地" in warning
    assert at.slider(key="gen_new").label == "要生成的词元数（贪心）"


def test_padding_in_chinese_starts_from_chinese_sentences_and_labels_the_sides(zh):
    at = app("zh")
    at.switch_page("pages/padding.py").run()
    assert not at.exception
    assert at.text_area(key="pad_texts").value.splitlines()[0] == "猫坐在垫子上。"
    assert at.radio(key="pad_side").options == ["右侧", "左侧"]
    at.radio(key="pad_side").set_value("left").run()  # the value stays the side's name
    assert at.metric[0].value == "0.0e+00"
    assert spec_of(at.get("plotly_chart")[0])["layout"]["xaxis"]["title"]["text"] == "位置"


def test_cost_page_tiling_in_chinese(zh):
    at = app("zh")
    at.switch_page("pages/cost.py").run()
    assert not at.exception
    assert at.button(key="cost_measure").label == "在本机上测量（进度条显示剩余时间）"
    tiling = spec_of(at.get("plotly_chart")[0])
    assert [a["text"] for a in tiling["layout"]["annotations"]] == [
        "分数，每次一个键块",
        "权重：分块（柱）与精确（线）",
    ]


def test_parity_bug_titles_in_both_languages(zh):
    assert tr(bug_title("no_scale")) == "完全不缩放"
    set_language("en")
    assert {name: str(bug_title(name)) for name in BUGS} == BUGS  # the CLI's English, unchanged


def test_figures_speak_the_session_language(zh):
    w = torch.full((2, 2), 0.5)
    fig = spec_of(make_head_heatmap_figure(w, ["0 a", "1 b"], ["0 a", "1 b"]))
    assert fig["layout"]["xaxis"]["title"]["text"] == "键（被关注）"
    assert fig["data"][0]["hovertemplate"] == "查询 %{y}<br>键 %{x}<br>权重 %{z:.5f}<extra></extra>"
    pooled = spec_of(make_pooled_head_figure(w, 4, 8, 8, kind="mean"))
    assert "4×4 个词元上的平均权重 %{z:.5f}" in pooled["data"][0]["hovertemplate"]
    rows = [{"path": "naive", "tokens": 256, "seconds": 0.1, "peak_mb": 2.0}]
    cost = spec_of(make_cost_figure(rows, "peak_mb", path_titles(), predicted=[(256, 2.0)], limit=1000))
    assert cost["layout"]["yaxis"]["title"]["text"] == "峰值内存 (MB)"
    assert [trace["name"] for trace in cost["data"]] == [
        tr(path_titles()["naive"]),
        "朴素，预测值（2 · n_head · n² 个浮点数）",
    ]
    example = tiling_example(8, 4)
    assert spec_of(make_tiling_figure(example.steps, example.weights))["data"][0]["name"].startswith("块 0：")
    labels = grid_show_labels(grid_show_options(STAT_COLUMNS))
    assert labels["all heads"] == "所有头" and labels["sorted by entropy"] == "按 熵 排序"  # the statistic named too
    assert "注意力汇聚" in tr(describe_flags())


def test_english_figures_keep_their_words():
    w = torch.full((2, 2), 0.5)
    fig = spec_of(make_head_heatmap_figure(w, ["0 a", "1 b"], ["0 a", "1 b"], q_hover=["0 a", "1 b%{z}"]))
    assert fig["data"][0]["hovertemplate"] == "query %{y}<br>key %{x}<br>weight %{z:.5f}<extra></extra>"
    assert str(describe_flags()).startswith("uniform (entropy_norm ≥ 0.9), saturated (max weight ≥ 0.9)")


def test_the_cached_grid_is_drawn_again_in_the_other_language():
    record = EmbeddedModel(EmbeddedConfig()).run("The cat sat on the mat.", 32)
    flag = "only heads flagged sink"

    def dimmed_text() -> set[str]:
        spec = spec_of(grid_figure(("i18n_a",), 1.0, record, flag))
        texts = next(trace for trace in spec["data"] if trace.get("name") == "tiles")["text"]
        return {line for text in texts for line in text.split("<br>") if line.startswith(("(", "（"))}

    try:
        set_language("zh")
        assert dimmed_text() == {"（被筛选淡化）"}
        set_language("en")
        assert dimmed_text() == {"(dimmed by the filter)"}
    finally:
        set_language("en")

"""Issue 18's smaller findings, page by page through AppTest: the [UNK] warning where a page reads the text, the
one-query-row default on a long text, and the pages that say they ignore the sidebar's text and model."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from tests.plotly_json import spec_of

ROOT = Path(__file__).resolve().parents[3]
CHINESE = "注意力机制让每个词都能看到句子里的其他词。"  # MiniLM reads most of it as [UNK]


def app() -> AppTest:
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()


def unknown_warnings(at: AppTest) -> list[str]:
    return [w.value for w in at.warning if "unknown token ([UNK])" in w.value and "MiniLM" in w.value]


def test_scaling_and_the_mask_lab_warn_when_minilm_reads_the_text_as_unknown_tokens():
    at = app()
    at.selectbox(key="model").set_value("minilm").run()
    at.text_area(key="text").input(CHINESE).run()
    for page in ("pages/scaling.py", "pages/masks.py"):
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception)
        assert len(unknown_warnings(at)) == 1, page
    at.text_area(key="text").input("The cat sat on the mat because it was tired.").run()
    assert not at.exception and not unknown_warnings(at)  # English: MiniLM reads every word


def test_padding_on_minilm_leaves_out_the_chinese_example_line_and_warns_on_chinese_typed():
    at = app()
    at.selectbox(key="model").set_value("minilm").run()
    at.switch_page("pages/padding.py").run()
    assert not at.exception, at.exception
    # the default's third line, 注意力机制很有用。, is 5 of MiniLM's 9 tokens [UNK]: the page starts without it
    assert at.text_area(key="pad_texts").value == "The cat sat on the mat.\nDogs bark."
    assert not unknown_warnings(at)
    at.text_area(key="pad_texts").input(f"The cat sat on the mat.\n{CHINESE}").run()
    assert not at.exception and len(unknown_warnings(at)) == 1


def test_the_embedded_model_keeps_the_whole_padding_example():
    at = app()
    at.switch_page("pages/padding.py").run()
    assert at.text_area(key="pad_texts").value == "The cat sat on the mat.\nDogs bark.\n注意力机制很有用。"


def test_cost_and_training_say_first_that_they_ignore_the_sidebars_text_and_model():
    at = app()
    for page in ("pages/cost.py", "pages/training.py"):
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception)
        assert "does not read the sidebar's text or model" in at.caption[0].value, page


def test_the_one_query_row_follows_the_window_until_a_row_is_picked():
    text = " ".join(f"w{i % 50}" for i in range(600))
    at = app()
    at.checkbox(key="causal").check()
    at.number_input(key="max_tokens").set_value(1024)
    at.text_area(key="text").input(text).run()
    at.switch_page("pages/heads.py").run()
    assert not at.exception, at.exception
    assert at.number_input(key="heads_row").value == 255  # the 256-token window's last row, not row 0
    row = spec_of(at.get("plotly_chart")[2])  # pooled head, window, row (the grid is no Plotly chart)
    assert row["layout"]["title"]["text"].startswith("255 ")
    at.number_input(key="heads_q0").set_value(100).run()
    assert at.number_input(key="heads_row").value == 355  # it follows the window
    at.number_input(key="heads_row").set_value(10).run()
    at.number_input(key="heads_q0").set_value(200).run()
    assert at.number_input(key="heads_row").value == 10  # a row the reader picked stays

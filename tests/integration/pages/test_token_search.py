"""Token search through AppTest: type a query, pick an occurrence, and the Heads window and row, or the Mask lab's
row, move to it (the embedded model)."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from tests.plotly_json import decode, spec_of

ROOT = Path(__file__).resolve().parents[3]


def planted(n: int, words: dict[int, str]) -> str:
    """``n`` one-token words "w0 w1 …" (the embedded model's tokenizer keeps each whole), ``words`` at their positions."""
    return " ".join(words.get(i, f"w{i}") for i in range(n))


def page(path: str, text: str, max_tokens: int) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.number_input(key="max_tokens").set_value(max_tokens)
    at.text_area(key="text").input(text).run()
    at.switch_page(path).run()
    assert not at.exception, at.exception
    return at


def occurrence_buttons(at: AppTest, key: str) -> list:
    return [b for b in at.button if b.key and b.key.startswith(f"{key}_go_")]


def test_picking_an_occurrence_on_the_heads_page_moves_the_window_and_the_row_to_it():
    at = page("pages/heads.py", planted(600, {300: "zebra", 301: "crossing", 560: "Zebra"}), 1024)
    assert at.number_input(key="heads_q0").value == 0
    at.text_input(key="heads_search_query").input("zebra").run()
    assert not at.exception, at.exception
    assert [b.key for b in occurrence_buttons(at, "heads_search")] == [
        "heads_search_go_300_301",
        "heads_search_go_560_561",
    ]
    assert any("2 occurrences of “zebra”" in c.value for c in at.caption)
    label = occurrence_buttons(at, "heads_search")[0].label
    assert label == "300: … w296 w297 w298 w299 **zebra** crossing w302 w303 w304 …"

    at.text_input(key="heads_search_query").input("zebra crossing").run()
    (button,) = occurrence_buttons(at, "heads_search")
    button.click().run()
    assert not at.exception, at.exception
    assert at.session_state["focus_token"] == 300 and at.session_state["focus_token_serial"] == 1
    # a 256-token window centred on token 300: queries and keys 172–427, and the one query row on it
    assert at.number_input(key="heads_q0").value == 172 and at.number_input(key="heads_k0").value == 172
    assert at.number_input(key="heads_row").value == 300
    charts = [spec_of(c) for c in at.get("plotly_chart")]
    window, row = charts[1], charts[2]  # after the pooled head (the grid is the page's own canvas, no Plotly chart)
    assert window["data"][0]["y"][300 - 172] == "300 zebra"
    assert row["layout"]["title"]["text"] == "300 zebra"
    assert decode(row["data"][0]["y"]).shape == (600,)

    # the window stays editable: the focus is applied once per pick, not on every rerun
    at.number_input(key="heads_q0").set_value(10).run()
    assert at.number_input(key="heads_q0").value == 10
    # near the end the window stops at the last token
    at.text_input(key="heads_search_query").input("Zebra").run()
    at.toggle(key="heads_search_case").set_value(True).run()
    (button,) = occurrence_buttons(at, "heads_search")
    button.click().run()
    assert at.number_input(key="heads_q0").value == 600 - 256 and at.number_input(key="heads_row").value == 560
    assert at.session_state["focus_token_serial"] == 2


def test_the_heads_search_says_when_nothing_matches_and_bounds_a_huge_query():
    at = page("pages/heads.py", planted(600, {}), 1024)
    at.text_input(key="heads_search_query").input("giraffe").run()
    assert not at.exception
    assert any("No token matches “giraffe”" in i.value for i in at.info)
    huge = "w1 " * 40_000  # 120,000 characters
    at.text_input(key="heads_search_query").input(huge).run()  # the browser takes no more than 200
    assert at.text_input(key="heads_search_query").value == "giraffe"
    at.text_input(key="heads_search_query").set_value(huge).run()  # a value that arrives another way is cut
    assert not at.exception
    assert any("first 200 characters" in c.value for c in at.caption)
    at.text_input(key="heads_search_query").input("w1").run()
    assert len(occurrence_buttons(at, "heads_search")) == 20  # w1, w10–w19, w100–w199: 111 tokens start with w1
    assert any("111 occurrences of “w1”; the first 20 are listed" in c.value for c in at.caption)


def test_picking_an_occurrence_on_the_mask_lab_moves_its_row_or_says_it_lies_beyond_what_it_reads():
    at = page("pages/masks.py", planted(200, {50: "zebra", 150: "giraffe"}), 256)
    assert at.number_input(key="mask_row").value == 127  # the last row the lab reads: it sees every key
    at.text_input(key="mask_search_query").input("zebra").run()
    (button,) = occurrence_buttons(at, "mask_search")
    button.click().run()
    assert not at.exception, at.exception
    assert at.number_input(key="mask_row").value == 50
    row = next(spec_of(c) for c in at.get("plotly_chart") if c.proto.id and "mask_row_fig" in c.proto.id)
    assert row["layout"]["title"]["text"] == "Row 50 (zebra) under the mask"
    y = decode(row["data"][0]["y"])
    assert y.shape == (128,) and abs(float(y[:51].sum()) - 1.0) < 1e-5  # causal: row 50 sees keys 0–50

    at.text_input(key="mask_search_query").input("giraffe").run()
    (button,) = occurrence_buttons(at, "mask_search")
    button.click().run()
    assert not at.exception, at.exception
    assert any("Token 150 lies beyond the 128 tokens the Mask lab reads" in i.value for i in at.info)
    assert at.number_input(key="mask_row").value == 50  # the row stays where it was

"""A ranked head opens in the Heads page on the same model and text, in a real Chromium (issue 37).

The model is chosen in the sidebar (not by a link) and the text typed there, then a page is opened from the menu
and a row of its ranked table clicked: the Heads page must open with the clicked layer and head (read from the
table's cells), the same model and the same text, in its link and in its widgets. Before the fix the switch
dropped the sidebar's values: SmolLM2's head 23.3 opened as 0.3 of the embedded model on the default sentence.
"""

import re

import pytest
import transformers

from tests.integration.chromium import assert_no_exception
from tests.integration.tiny_models import tiny
from tools.browser import choose_page, choose_sidebar_option, set_sidebar_value, wait_until_idle

pytestmark = pytest.mark.browser

TEXT = "Alice gave Bob a book because he asked."
CORRUPT = "Alice gave Bob a pen because he asked."  # as many tokens, one word swapped
SMOLLM2 = "SmolLM2-135M-Instruct decoder (GQA)"
FOLDER = "Local folder or hub id…"
ROW_PX, HEADER_PX = 35, 35  # a data row's and the header's height in Streamlit's table
SHOWN_ROWS = 5  # rows read and clicked among: each in view without scrolling the table


def ranked_table(page, nth: int = 0):
    """The ``nth`` clickable table (a canvas-drawn grid) of the main area, scrolled into view."""
    table = page.locator('[data-testid="stMain"] [data-testid="stDataFrame"]').filter(has=page.locator("canvas"))
    table.nth(nth).wait_for(state="visible", timeout=180_000)
    table.nth(nth).scroll_into_view_if_needed()
    return table.nth(nth)


def cell(table, row: int, col: int) -> str:
    """A cell's text, from the grid's accessible table (the canvas draws the same): row 0 is the first data row."""
    return table.locator(f'[id^="glide-cell-{col}-{row}"]').first.inner_text().strip()


def click_row(page, table) -> tuple[int, int]:
    """Click the selection cell of the row with the latest layer among the first few, as a reader selects a row (the
    bug opened layer 0 whatever was clicked); the (layer, head) it lists (columns 1, 2: column 0 is the box)."""
    layers = [int(cell(table, row, 1)) for row in range(SHOWN_ROWS)]
    row = layers.index(max(layers))
    layer, head = layers[row], int(cell(table, row, 2))
    box = table.bounding_box()
    page.mouse.click(box["x"] + 14, box["y"] + HEADER_PX + ROW_PX * row + ROW_PX // 2)
    page.wait_for_url("**/heads**", timeout=60_000)
    wait_until_idle(page, 180_000)
    return layer, head


def assert_heads_page_on(page, layer: int, head: int, model: str, folder: str | None = None) -> None:
    """The Heads page, open on ``layer``.``head`` of ``model`` with the test's text: in the link and the widgets."""
    assert_no_exception(page)
    assert page.locator("h1").first.inner_text().startswith("Heads")
    assert re.search(rf"[?&]layer={layer}(&|$)", page.url) and re.search(rf"[?&]head={head}(&|$)", page.url), page.url
    sidebar = page.locator('[data-testid="stSidebar"]')
    assert sidebar.get_by_label("Text to analyse", exact=True).input_value() == TEXT
    assert chosen(sidebar, "Model") == model
    if folder is not None:
        assert sidebar.get_by_label("Model folder or hub id", exact=True).input_value() == folder
    main = page.locator('[data-testid="stMain"]')
    assert chosen(main, "Layer") == f"L{layer}"
    assert re.fullmatch(rf"H{head}\b.*", chosen(main, "Head")), chosen(main, "Head")


def chosen(area, label: str) -> str:
    """What the selectbox labelled ``label`` in ``area`` shows."""
    box = area.locator('[data-testid="stSelectbox"]').filter(has=area.page.get_by_text(label, exact=True)).first
    return box.locator("input").input_value()


def choose(page, model: str, folder: str | None = None) -> None:
    """The model and a short text, chosen in the sidebar as a user does (a small token limit keeps runs short)."""
    page.wait_for_selector('[data-testid="stSidebar"]')
    wait_until_idle(page)
    choose_sidebar_option(page, "Model", model)
    if folder is not None:
        set_sidebar_value(page, "Model folder or hub id", folder)
    set_sidebar_value(page, "Text to analyse", TEXT)
    set_sidebar_value(page, "Max tokens", "16")


def test_ranked_heads_of_smollm2_open_on_smollm2(server, page):
    """Ablation's estimate and Patching's ranking, on SmolLM2."""
    page.goto(server)
    choose(page, SMOLLM2)
    choose_page(page, "Ablation")
    table = ranked_table(page)
    layer, head = click_row(page, table)
    assert_heads_page_on(page, layer, head, SMOLLM2)
    choose_page(page, "Patching")
    corrupt = page.locator('[data-testid="stMain"]').get_by_label(re.compile("^Corrupted text"))
    corrupt.fill(CORRUPT)
    corrupt.press("Control+Enter")
    wait_until_idle(page, 180_000)
    assert_no_exception(page)
    layer, head = click_row(page, ranked_table(page))
    assert_heads_page_on(page, layer, head, SMOLLM2)


def test_a_ranked_head_of_a_local_folder_opens_on_that_folder(server, page, smollm2, tmp_path):
    """A local folder (a tiny random Llama): Ablation's ranked row opens on the same folder."""
    folder = str(tiny(tmp_path / "llama", smollm2, transformers.LlamaConfig, transformers.LlamaForCausalLM))
    page.goto(server)
    choose(page, FOLDER, folder)
    choose_page(page, "Ablation")
    layer, head = click_row(page, ranked_table(page))
    assert_heads_page_on(page, layer, head, FOLDER, folder)

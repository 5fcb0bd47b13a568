"""The Heads grid in a real headless Chromium: a click on a tile opens that head large and puts it in the link,
and at 512 tokens the first draw and each update stay in the payload budget."""

import pytest

from tests.integration.chromium import assert_no_exception, websocket_bytes
from tools.browser import grid_tile_point, set_sidebar_value, wait_for_charts, wait_for_grid, wait_until_idle

pytestmark = pytest.mark.browser


def large_title(page) -> str:
    """The large view's title: the page's first Plotly chart (the grid above it is the page's own canvas)."""
    return page.locator(".js-plotly-plot").first.locator(".gtitle").first.text_content()


LARGE_TITLE_STARTS = (
    "title => document.querySelector('.js-plotly-plot')?.querySelector('.gtitle')?.textContent.startsWith(title)"
)


def test_clicking_a_grid_tile_opens_that_head(server, page):
    page.goto(f"{server}/heads")
    wait_for_charts(page, 2)  # the large view and the statistics
    wait_until_idle(page)
    assert_no_exception(page)
    assert large_title(page).startswith("L0 H0")
    x, y = grid_tile_point(page, 1, 2)  # the embedded default: 2 layers x (4 heads + the mean); L1 H2
    page.mouse.move(x, y)
    hover = page.locator(".attnviz-grid .tip")
    hover.wait_for(timeout=10_000)
    assert "L1 H2" in hover.text_content()
    page.mouse.click(x, y)
    page.wait_for_function(LARGE_TITLE_STARTS, arg="L1 H2", timeout=30_000)
    wait_until_idle(page)
    assert_no_exception(page)
    head = page.locator('[data-testid="stSelectbox"]').filter(has=page.get_by_text("Head", exact=True)).first
    assert "H2" in head.text_content() or head.get_by_role("combobox").input_value() == "H2", head.inner_html()
    assert "layer=1" in page.url and "head=2" in page.url


def test_a_link_opens_its_head(server, page):
    page.goto(f"{server}/heads?layer=1&head=3")
    wait_for_charts(page, 2)
    wait_until_idle(page)
    assert_no_exception(page)
    assert large_title(page).startswith("L1 H3")


PAYLOAD_BUDGET = 1_500_000  # bytes the server may send for one update at 512 tokens (the budget)


def test_512_tokens_and_12_heads_stay_under_1_5mb_for_the_first_draw_and_a_tile_click(server, page):
    received = websocket_bytes(page)
    page.goto(f"{server}/heads")
    page.locator("h1").first.wait_for(state="visible")
    wait_until_idle(page)
    for label, value in [("Max tokens", "512"), ("n_layer", "2"), ("n_head", "12"), ("d_model", "768")]:
        set_sidebar_value(page, label, value)
    received.clear()
    set_sidebar_value(page, "Text to analyse", " ".join(f"word{i % 97}" for i in range(600)))
    wait_for_charts(
        page, 4
    )  # the pooled head, its full-resolution window, one row, the statistics (the grid: a canvas)
    wait_until_idle(page)
    assert_no_exception(page)
    assert page.get_by_text("Pooled: 512 tokens").count() > 0
    first = sum(received)

    received.clear()
    assert wait_for_grid(page).get_attribute("data-tiles").count('"cols":13')  # 12 heads and the mean
    x, y = grid_tile_point(page, 1, 7)  # L1 H7
    page.mouse.move(x, y)
    page.locator(".attnviz-grid .tip").wait_for(timeout=10_000)
    assert "L1 H7" in page.locator(".attnviz-grid .tip").text_content()
    page.mouse.click(x, y)
    page.wait_for_function(LARGE_TITLE_STARTS, arg="L1 H7", timeout=30_000)
    wait_until_idle(page)
    assert_no_exception(page)
    update = sum(received)
    print(f"heads page, 12 heads x 512 tokens: first draw {first / 1e6:.2f} MB, a tile click {update / 1e6:.2f} MB")
    assert 0 < first <= PAYLOAD_BUDGET, f"first draw: {first} bytes"
    assert 0 < update <= PAYLOAD_BUDGET, f"tile click: {update} bytes"

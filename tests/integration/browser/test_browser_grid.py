"""The Heads grid in a real headless Chromium: a click on a tile opens that head large and puts it in the link,
and at 512 tokens the first draw and each update stay in the payload budget."""

import pytest

from tests.integration.chromium import assert_no_exception, websocket_bytes
from tools.browser import set_sidebar_value, wait_for_charts, wait_until_idle

pytestmark = pytest.mark.browser


def large_title(page) -> str:
    return page.locator(".js-plotly-plot").nth(1).locator(".gtitle").first.text_content()


def test_clicking_a_grid_tile_opens_that_head(server, page):
    page.goto(f"{server}/heads")
    wait_for_charts(page, 3)
    wait_until_idle(page)
    assert_no_exception(page)
    assert large_title(page).startswith("L0 H0")
    grid = page.locator(".js-plotly-plot").first
    grid.scroll_into_view_if_needed()
    box = grid.locator(".nsewdrag").first.bounding_box()
    n_layer, n_col = 2, 5  # the embedded default: 2 layers x (4 heads + the mean)
    x, y = box["x"] + box["width"] * 2.5 / n_col, box["y"] + box["height"] * 1.5 / n_layer  # L1 H2
    page.mouse.move(x, y)
    hover = page.locator(".hoverlayer .hovertext").first
    hover.wait_for(timeout=10_000)
    assert "L1 H2" in hover.text_content()
    page.mouse.click(x, y)
    page.wait_for_function(
        "() => document.querySelectorAll('.js-plotly-plot')[1]?.querySelector('.gtitle')?.textContent.startsWith('L1 H2')",
        timeout=30_000,
    )
    wait_until_idle(page)
    assert_no_exception(page)
    head = page.locator('[data-testid="stSelectbox"]').filter(has=page.get_by_text("Head", exact=True)).first
    assert "H2" in head.text_content() or head.get_by_role("combobox").input_value() == "H2", head.inner_html()
    assert "layer=1" in page.url and "head=2" in page.url


def test_a_link_opens_its_head(server, page):
    page.goto(f"{server}/heads?layer=1&head=3")
    wait_for_charts(page, 3)
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
    wait_for_charts(page, 5)  # the grid, the pooled head, its full-resolution window, one row, the statistics
    wait_until_idle(page)
    assert_no_exception(page)
    assert page.get_by_text("Pooled: 512 tokens").count() > 0
    first = sum(received)

    received.clear()
    grid = page.locator(".js-plotly-plot").first
    grid.scroll_into_view_if_needed()
    box = grid.locator(".nsewdrag").first.bounding_box()
    n_layer, n_col = 2, 13  # 12 heads and the mean
    x, y = box["x"] + box["width"] * 7.5 / n_col, box["y"] + box["height"] * 1.5 / n_layer  # L1 H7
    page.mouse.move(x, y)
    page.locator(".hoverlayer .hovertext").first.wait_for(timeout=10_000)
    page.mouse.click(x, y)
    page.wait_for_function(
        "() => document.querySelectorAll('.js-plotly-plot')[1]?.querySelector('.gtitle')?.textContent.startsWith('L1 H7')",
        timeout=30_000,
    )
    wait_until_idle(page)
    assert_no_exception(page)
    update = sum(received)
    print(f"heads page, 12 heads x 512 tokens: first draw {first / 1e6:.2f} MB, a tile click {update / 1e6:.2f} MB")
    assert 0 < first <= PAYLOAD_BUDGET, f"first draw: {first} bytes"
    assert 0 < update <= PAYLOAD_BUDGET, f"tile click: {update} bytes"

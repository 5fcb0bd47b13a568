"""The Token view in a real headless Chromium: a click on a token picks it, and 512 tokens stay in the payload budget."""

import pytest

from tests.integration.chromium import assert_no_exception, websocket_bytes
from tools.browser import set_sidebar_value, wait_for_charts, wait_until_idle

pytestmark = pytest.mark.browser


def chosen_token(page) -> str:
    """The Token selectbox's shown value."""
    return page.locator('[data-testid="stSelectbox"]').filter(has_text="Token").first.locator("input").input_value()


def test_clicking_a_token_in_the_text_picks_it(server, page):
    page.goto(f"{server}/tokens")
    page.locator("h1").first.wait_for(state="visible")
    wait_for_charts(page, 4)
    wait_until_idle(page)
    assert chosen_token(page).startswith("10")  # a decoder's last token, or the last token of an encoder
    page.wait_for_timeout(1000)  # plotly finishes its layout after the chart first appears
    text = page.locator(".js-plotly-plot").nth(1)  # every head of the layer, under the running text
    area = text.locator(".nsewdrag").first.bounding_box()
    n_tokens = 11  # "The cat sat on the mat because it was tired."
    x = area["x"] + area["width"] * (1.5 / n_tokens)  # the second token's column
    y = area["y"] + area["height"] * 0.5
    page.mouse.move(x, y)  # plotly takes the click on the point under the pointer
    page.wait_for_timeout(300)
    hover = page.locator(".hoverlayer").nth(1).text_content()
    assert "cat" in hover and "weight 0." in hover  # the numbers show through the points that take the clicks
    page.mouse.click(x, y)
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=stSelectbox] input')].some(e => e.value === '1 cat')",
        timeout=30_000,
    )
    wait_until_idle(page)
    assert_no_exception(page)
    assert chosen_token(page) == "1 cat"
    # the running text: "The" fills columns 0-3 of the 96-column line, "cat" 4-7, "sat" 8-11
    page.wait_for_timeout(1000)
    running = page.locator(".js-plotly-plot").first.locator(".nsewdrag").first.bounding_box()
    x = running["x"] + running["width"] * (9.9 + 0.5) / 97  # the middle of "sat", on an x range of -0.5..96.5
    y = running["y"] + running["height"] * 0.5  # line 0, in the middle of the y range 1.1..-1.1
    page.mouse.move(x, y)
    page.wait_for_timeout(300)
    assert "2 sat" in page.locator(".hoverlayer").first.text_content()
    page.mouse.click(x, y)
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=stSelectbox] input')].some(e => e.value === '2 sat')",
        timeout=30_000,
    )
    wait_until_idle(page)
    assert_no_exception(page)


def test_512_tokens_and_12_heads_stay_under_1_5mb_per_update(server, page):
    received = websocket_bytes(page)
    page.goto(f"{server}/tokens")
    page.locator("h1").first.wait_for(state="visible")
    wait_until_idle(page)
    for label, value in [("Max tokens", "512"), ("n_layer", "2"), ("n_head", "12"), ("d_model", "768")]:
        set_sidebar_value(page, label, value)
    set_sidebar_value(page, "Text to analyse", " ".join(f"word{i % 97}" for i in range(600)))
    wait_for_charts(page, 5)
    wait_until_idle(page)
    assert_no_exception(page)
    received.clear()
    page.get_by_text("is attended by (its key column)", exact=True).click()  # one update: the other direction
    wait_until_idle(page)
    wait_for_charts(page, 5)
    assert_no_exception(page)
    payload = sum(received)
    assert 0 < payload < 1_500_000, f"{payload} bytes"
    print(f"token view, 12 heads x 512 tokens: {payload / 1e6:.2f} MB for one update")

"""Which heads matter, in a real Chromium: a ranked head is one click from its attention in the Heads page."""

import pytest

from tests.integration.chromium import assert_no_exception
from tools.browser import wait_for_charts, wait_until_idle

pytestmark = pytest.mark.browser


def test_a_ranked_head_opens_in_the_heads_page(server, page):
    """The Ablation page's estimate on the embedded model: clicking the first ranked row (its checkbox, as a reader
    selects a row) switches to the Heads page with that head's large view opened."""
    page.goto(f"{server}/ablation")
    wait_until_idle(page)
    wait_for_charts(page, 1)
    assert_no_exception(page)
    table = page.locator('[data-testid="stDataFrame"]').filter(has=page.locator("canvas")).first
    table.wait_for(state="visible")
    box = table.bounding_box()
    page.mouse.click(box["x"] + 14, box["y"] + 35 + 17)  # the first data row's selection cell (header 35 px high)
    page.wait_for_url("**/heads**", timeout=60_000)
    wait_until_idle(page)
    assert_no_exception(page)
    assert page.locator("h1").first.inner_text().startswith("Heads")
    assert "layer=" in page.url and "head=" in page.url

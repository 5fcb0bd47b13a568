"""Exports in a real headless Chromium: the camera saves SVG, the HTML download draws offline from file://,
and the Heads page's safetensors download holds the open head's weights."""

import re

import pytest
import torch
from safetensors.torch import load as load_safetensors

from attnviz import settings
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.registry import EMBEDDED, SourceSpec, open_source
from tests.integration.chromium import assert_no_exception
from tools.browser import wait_for_charts, wait_until_idle

pytestmark = pytest.mark.browser


def open_export_menu(page, index: int):
    """Open the ``index``-th Export popover of the page; return the popover's open panel."""
    page.get_by_role("button", name=re.compile("Export")).nth(index).click()
    panel = page.locator('[data-testid="stPopoverBody"]').last
    panel.wait_for(state="visible")
    return panel


def test_the_camera_saves_svg_and_the_html_export_draws_offline(server, page, tmp_path):
    page.goto(f"{server}/heads")
    page.locator("h1").first.wait_for(state="visible")
    wait_for_charts(page, 2)  # the large view and the statistics (the grid is the page's own canvas)
    wait_until_idle(page)
    assert_no_exception(page)
    options = page.evaluate(
        "() => [...document.querySelectorAll('.js-plotly-plot')].map(p => p._context.toImageButtonOptions)"
    )
    assert options[0]["format"] == "svg" and options[0]["filename"] == "attnviz-heads_large"
    assert {o["format"] for o in options} == {"svg"}

    panel = open_export_menu(page, 0)  # the grid's: its interactive Plotly figure as HTML
    with page.expect_download() as info:
        panel.get_by_role("button", name="Chart as HTML (opens offline)").click()
    download = info.value
    assert download.suggested_filename == "attnviz-heads_grid.html"
    path = tmp_path / "grid.html"
    download.save_as(path)
    html = path.read_text()
    assert not re.search(r"<script[^>]*\bsrc=", html)

    offline = page.context.new_page()
    fetched = []
    offline.route(re.compile(r"^https?://"), lambda route: (fetched.append(route.request.url), route.abort()))
    offline.goto(path.as_uri())
    offline.wait_for_selector(".main-svg", timeout=30_000)
    assert offline.locator(".js-plotly-plot .heatmaplayer, .js-plotly-plot image").count() >= 1
    assert fetched == []  # drawn from the file alone
    assert offline.evaluate("() => document.querySelector('.js-plotly-plot')._context.toImageButtonOptions.format") == (
        "png"
    )
    offline.close()


def test_the_open_heads_tensors_download_as_safetensors(server, page, tmp_path):
    page.goto(f"{server}/heads?layer=1&head=2")
    page.locator("h1").first.wait_for(state="visible")
    wait_for_charts(page, 2)  # the large view and the statistics (the grid is the page's own canvas)
    wait_until_idle(page)
    n_menus = page.get_by_role("button", name=re.compile("Export")).count()
    panel = open_export_menu(page, n_menus - 3)  # grid, large view, the head's tensors, stats chart, stats table
    with page.expect_download() as info:
        panel.get_by_role("button", name="Tensors (.safetensors)").click()
    path = tmp_path / "head.safetensors"
    info.value.save_as(path)
    loaded = load_safetensors(path.read_bytes())
    source = open_source(SourceSpec(EMBEDDED, "cpu", EmbeddedConfig()))
    record = source.run(settings.DEFAULT_TEXT, settings.MAX_TOKENS.default)
    torch.testing.assert_close(loaded["weights"], record.weights(1, 2), rtol=0, atol=1e-6)
    assert torch.equal(loaded["mask"], record.mask(1))

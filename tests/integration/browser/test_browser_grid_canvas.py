"""The Heads page's grid on its own canvas (attnviz.app.grid_canvas), in a real headless Chromium: drawn once and
before Plotly, in Plotly's colours, with the hover, click and keyboard of the Plotly grid it replaced."""

import base64
import io
import json
import time

import numpy as np
import pytest
from PIL import Image

from attnviz import settings
from attnviz.app.static_assets import PLOTLY
from attnviz.figures.grid_picture import grid_palette
from attnviz.i18n.catalogue import catalogue
from tests.integration.chromium import NO_TOUR_WARM, assert_no_exception
from tools.browser import (
    GRID_CANVAS,
    grid_tile_point,
    set_sidebar_value,
    streamlit_server,
    wait_for_charts,
    wait_for_grid,
    wait_until_idle,
)

pytestmark = pytest.mark.browser

N_LAYER, N_COL = settings.N_LAYER.default, settings.N_HEAD.default + 1  # the embedded default: its heads and the mean
TIP = ".attnviz-grid .tip"

# the component's data, as its canvas drew it (head_grid.js keeps it on the element holding the component)
DRAWN_DATA = """c => {
    for (let n = c; n; n = n.parentNode ?? n.host) if (n.__attnvizGrid) return n.__attnvizGrid.data;
    return null;
}"""


def large_title(page) -> str:
    """The large view's title: the page's first Plotly chart."""
    return page.locator(".js-plotly-plot").first.locator(".gtitle").first.text_content()


def opened(page, url: str) -> None:
    """Open the Heads page as a new visitor and wait for its grid and then its charts (the large view, statistics)."""
    page.goto(url)
    wait_for_grid(page)
    wait_until_idle(page)
    wait_for_charts(page, 2)
    wait_until_idle(page)
    assert_no_exception(page)


def console_errors(page) -> list[str]:
    """Every console error the page logs from now on, but for the two 404s of Streamlit's own probe of a deep link's
    path (``/heads/_stcore/health`` and ``host-config``: it looks for the app's base path there first)."""
    errors = []

    def heard(msg) -> None:
        if msg.type == "error" and "/_stcore/" not in (msg.location or {}).get("url", ""):
            errors.append(msg.text)

    page.on("console", heard)
    return errors


# every picture a grid canvas on the page draws (one drawImage a draw), whichever element: a canvas that a rerun
# remounts starts its own data-draws again, this count goes on
COUNT_GRID_DRAWS = """
window.__gridDraws = 0;
const drawImage = CanvasRenderingContext2D.prototype.drawImage;
CanvasRenderingContext2D.prototype.drawImage = function (...args) {
  const canvas = this.canvas;
  if (canvas.isConnected && canvas.parentElement?.classList?.contains('attnviz-grid')) window.__gridDraws += 1;
  return drawImage.apply(this, args);
};
"""


@pytest.mark.parametrize("text", ["cached", "new"])
def test_the_grid_is_drawn_once_at_the_size_of_its_picture(server, page, text):
    """Drawn once, and not again by the rerun that brings the charts: for the default text (its record in the
    server's cache after any earlier visit) and for a text the server has never seen (the first run computes it)."""
    page.add_init_script(COUNT_GRID_DRAWS)
    if text == "cached":
        page.goto(f"{server}/heads")
        wait_for_grid(page)
        wait_until_idle(page)
        page.close()
        page = page.context.new_page()  # a second visitor of the same text (a new session: its first map again)
        page.add_init_script(COUNT_GRID_DRAWS)
        page.goto(f"{server}/heads")
    else:
        page.goto(f"{server}/heads?text=a+new+text+{time.time_ns()}")  # a shared link to a text no one ran
    canvas = wait_for_grid(page)
    wait_until_idle(page)
    assert canvas.get_attribute("data-draws") == "1"
    wait_for_charts(page, 2)  # the rerun the canvas's first draw started brings the charts
    wait_until_idle(page)
    assert_no_exception(page)
    # that rerun sent the same picture: neither this canvas nor a new one drew it again
    assert wait_for_grid(page).get_attribute("data-draws") == "1"
    assert page.evaluate("window.__gridDraws") == 1
    data = canvas.evaluate(DRAWN_DATA)
    assert (data["n_layer"], data["n_col"]) == (N_LAYER, N_COL)
    picture = Image.open(io.BytesIO(base64.b64decode(data["png"])))
    assert picture.size == (N_COL * data["tw"], N_LAYER * data["th"])  # (width, height): every tile's cells
    tiles = json.loads(canvas.get_attribute("data-tiles"))
    assert (tiles["rows"], tiles["cols"]) == (N_LAYER, N_COL)
    assert tiles["w"] / data["tw"] == pytest.approx(tiles["h"] / data["th"])  # square cells
    size = canvas.evaluate(
        "c => ({w: c.width, h: c.height, cssW: c.getBoundingClientRect().width, "
        "cssH: c.getBoundingClientRect().height, dpr: window.devicePixelRatio || 1})"
    )
    assert size["cssW"] >= tiles["left"] + N_COL * tiles["w"] and size["cssH"] >= tiles["top"] + N_LAYER * tiles["h"]
    assert size["cssW"] <= tiles["left"] + N_COL * tiles["w"] + 60, size  # the tiles and their labels, no more
    assert size["w"] == round(size["cssW"] * size["dpr"]) and size["h"] == round(size["cssH"] * size["dpr"])


def test_hover_names_the_tile_and_a_click_opens_it(server, page):
    opened(page, f"{server}/heads")
    assert large_title(page).startswith("L0 H0")
    x, y = grid_tile_point(page, 1, 2)
    page.mouse.move(x, y)
    tip = page.locator(TIP)
    tip.wait_for(timeout=10_000)
    assert tip.locator(".name").text_content().startswith("L1 H2")
    assert tip.locator(".hint").text_content() == catalogue("en")["grid_canvas.hint"]
    focus = page.locator(".attnviz-grid .focus")
    assert focus.is_visible()
    box = focus.bounding_box()  # the red box is around the hovered tile
    assert box["x"] <= x <= box["x"] + box["width"] and box["y"] <= y <= box["y"] + box["height"], (box, x, y)
    tiles = json.loads(wait_for_grid(page).get_attribute("data-tiles"))
    assert box["width"] == pytest.approx(tiles["w"] + 2, abs=1) and box["height"] == pytest.approx(
        tiles["h"] + 2, abs=1
    )
    page.mouse.click(x, y)
    page.wait_for_function(
        "() => document.querySelector('.js-plotly-plot .gtitle')?.textContent.startsWith('L1 H2')", timeout=30_000
    )
    wait_until_idle(page)
    assert_no_exception(page)
    assert large_title(page).startswith("L1 H2")
    assert "layer=1" in page.url and "head=2" in page.url


def test_the_keyboard_moves_over_the_tiles_and_opens_one(server, page):
    opened(page, f"{server}/heads")
    canvas = wait_for_grid(page)
    canvas.focus()
    tip = page.locator(TIP)
    page.keyboard.press("ArrowDown")  # the first key shows the first tile
    tip.wait_for(timeout=10_000)
    assert tip.locator(".name").text_content().startswith("L0 H0")
    for key in ("ArrowDown", "ArrowRight"):
        page.keyboard.press(key)
    assert tip.locator(".name").text_content().startswith("L1 H1")
    assert page.locator(".attnviz-grid .focus").is_visible()
    page.keyboard.press("Enter")
    page.wait_for_function(
        "() => document.querySelector('.js-plotly-plot .gtitle')?.textContent.startsWith('L1 H1')", timeout=30_000
    )
    wait_until_idle(page)
    assert_no_exception(page)
    assert "layer=1" in page.url and "head=1" in page.url


def test_the_canvas_draws_the_palette_colour_of_each_cell(server, page):
    """The canvas's pixels are exactly the colours Plotly's heatmap gives each level (grid_palette): the picture's
    palette is that palette, and the middle of a cell of every tile shows its level's colour."""
    opened(page, f"{server}/heads")
    canvas = wait_for_grid(page)
    data = canvas.evaluate(DRAWN_DATA)
    picture = Image.open(io.BytesIO(base64.b64decode(data["png"])))
    assert picture.mode == "P"
    palette = grid_palette()
    assert np.array_equal(np.array(picture.getpalette()[: 3 * 256], dtype=np.uint8).reshape(-1, 3), palette)
    levels = np.array(picture)  # (n_layer * th, n_col * tw) palette indices
    tiles = json.loads(canvas.get_attribute("data-tiles"))
    th, tw = data["th"], data["tw"]
    unit = tiles["w"] / tw  # CSS px per cell
    assert unit >= 3, unit  # a cell wide enough to read its middle pixel
    checked = 0
    for r in range(N_LAYER):
        for c in range(N_COL):
            assert not data["dimmed"][r][c]
            for i, j in {(th // 2, tw // 2), (th // 3, 2 * tw // 3), (th - 1, 0)}:
                x = tiles["left"] + c * tiles["w"] + (j + 0.5) * unit
                y = tiles["top"] + r * tiles["h"] + (i + 0.5) * unit
                if min(x - tiles["left"] - c * tiles["w"], y - tiles["top"] - r * tiles["h"]) < 2:
                    continue  # within the white line between tiles
                pixel = canvas.evaluate(
                    """(c, [x, y]) => {
                        const dpr = window.devicePixelRatio || 1;
                        return [...c.getContext('2d').getImageData(Math.floor(x * dpr), Math.floor(y * dpr), 1, 1).data];
                    }""",
                    [x, y],
                )
                level = levels[r * th + i, c * tw + j]
                assert pixel == [*palette[level].tolist(), 255], (r, c, i, j, level, pixel)
                checked += 1
    assert checked >= N_LAYER * N_COL


def test_a_one_token_text_draws_no_grid_and_holds_no_chart_back(server, page):
    """A one-token text's page is a note (nothing to attend to); the next text's grid is the session's first map,
    and the charts follow it."""
    errors = console_errors(page)
    page.goto(f"{server}/heads?text=word0")
    page.get_by_text("This text is a single token", exact=False).wait_for(timeout=90_000)
    wait_until_idle(page)
    assert_no_exception(page)
    assert page.locator(GRID_CANVAS).count() == 0 and page.locator(".js-plotly-plot").count() == 0
    set_sidebar_value(page, "Text to analyse", "word0 word1")  # the smallest grid: two tokens
    canvas = wait_for_grid(page)
    wait_for_charts(page, 2)
    wait_until_idle(page)
    assert_no_exception(page)
    assert canvas.get_attribute("data-draws") == "1"
    data = canvas.evaluate(DRAWN_DATA)
    assert (data["n_layer"], data["n_col"], data["th"], data["tw"]) == (N_LAYER, N_COL, 2, 2)
    x, y = grid_tile_point(page, N_LAYER - 1, N_COL - 1)  # the last tile: the last layer's mean
    page.mouse.move(x, y)
    page.locator(TIP).wait_for(timeout=10_000)
    assert page.locator(f"{TIP} .name").text_content().startswith(f"L{N_LAYER - 1}")
    assert errors == [], errors


def test_a_long_pooled_text_draws_the_grid(server, page):
    errors = console_errors(page)
    opened(page, f"{server}/heads")
    canvas = wait_for_grid(page)
    set_sidebar_value(page, "Max tokens", "512")
    before = canvas.evaluate(DRAWN_DATA)["png"]
    set_sidebar_value(page, "Text to analyse", " ".join(f"word{i % 97}" for i in range(500)))
    wait_for_charts(page, 4)  # the pooled map, its full-resolution window, one row, the statistics
    wait_until_idle(page)
    assert_no_exception(page)
    assert page.get_by_text("Pooled: 500 tokens", exact=False).count() > 0
    canvas = wait_for_grid(page)
    data = canvas.evaluate(DRAWN_DATA)
    assert data["png"] != before and int(canvas.get_attribute("data-draws")) >= 1  # the new text's picture is drawn
    assert (data["n_layer"], data["n_col"]) == (N_LAYER, N_COL)
    x, y = grid_tile_point(page, N_LAYER - 1, N_COL - 1)
    page.mouse.move(x, y)
    page.locator(TIP).wait_for(timeout=10_000)
    assert page.locator(f"{TIP} .name").text_content().startswith(f"L{N_LAYER - 1}")
    assert errors == [], errors


def test_the_hover_hint_is_in_chinese(server, page):
    opened(page, f"{server}/heads?lang=zh")
    x, y = grid_tile_point(page, 0, 1)
    page.mouse.move(x, y)
    page.locator(TIP).wait_for(timeout=10_000)
    assert (
        page.locator(f"{TIP} .hint").text_content()
        == catalogue("zh")["grid_canvas.hint"]
        == "点击（或按 Enter）打开这个头"
    )


# serve.py's page holds Plotly's chunk back on the Heads page until the canvas has drawn (attnviz.app.static_assets)
FIRST_MAP_AND_PLOTLY = f"""() => ({{
    firstMap: window.__attnvizFirstMap ?? null,
    plotly: performance.getEntriesByType('resource')
        .filter(e => new URL(e.name).pathname.startsWith('/static/js/{PLOTLY}.') && e.name.endsWith('.js'))
        .map(e => e.startTime),
}})"""


@pytest.fixture(scope="module")
def served():
    with streamlit_server(timeout=300.0, script="serve.py", env=NO_TOUR_WARM) as url:
        yield url


def test_served_the_grid_is_drawn_before_plotly_is_requested(served, page):
    page.goto(f"{served}/heads")  # a fresh visitor: nothing cached
    wait_for_grid(page)
    wait_for_charts(page, 2)
    wait_until_idle(page)
    assert_no_exception(page)
    times = page.evaluate(FIRST_MAP_AND_PLOTLY)
    assert times["firstMap"] is not None and times["plotly"], times
    assert all(start > times["firstMap"] for start in times["plotly"]), times
    assert large_title(page).startswith("L0 H0")

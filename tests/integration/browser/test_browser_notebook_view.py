"""The notebook viewer (attnviz.notebook.assets: head_grid.js's code and viewer.js) in a real headless Chromium, on a
page opened as file:// with every request blocked, as a notebook saved as HTML opens anywhere: drawn, in the grid's
colours, with the hover, the click, the lines, the sentence selector and the kinds working, and no request made."""

import base64
import io
import itertools
import json

import numpy as np
import pytest
from PIL import Image

from attnviz.figures.grid_picture import grid_palette
from tests.integration.browser.notebook_pages import (
    assets_markup,
    causal_weights,
    colour_of,
    hand_kind,
    hand_payload,
    levels16,
    page_html,
    view_markup,
)

pytestmark = pytest.mark.browser

N = 20  # tokens of the short text
TOKENS = [f"{i} tok{i}" for i in range(N)]
WEIGHTS = causal_weights(0, 2, 3, N)  # (n_layer, n_head, q, k)
PIXEL = """(c, [x, y]) => {
    const dpr = window.devicePixelRatio || 1;
    return [...c.getContext('2d').getImageData(Math.floor(x * dpr), Math.floor(y * dpr), 1, 1).data];
}"""
# every "attnviz:notebook-drawn" event that reaches the document (it bubbles from its element)
COUNT_EVENTS = (
    "window.__heard = []; document.addEventListener('attnviz:notebook-drawn', e => window.__heard.push(e.target.id));"
)


def opened(page, tmp_path, html: str, drawn: int = 1) -> list[str]:
    """Open ``html`` as a file with every request but the file's own refused; wait until ``drawn`` views are drawn.
    Returns the list of requests attempted besides the file (it fills as the page goes on)."""
    path = tmp_path / "view.html"
    path.write_text(html, encoding="utf-8")
    url = path.as_uri()
    attempted = []

    def refuse(route) -> None:
        if route.request.url == url:
            route.continue_()
        else:
            attempted.append(route.request.url)
            route.abort()

    page.route("**/*", refuse)
    page.on("request", lambda r: r.url != url and not r.url.startswith("data:") and attempted.append(r.url))
    page.on("console", lambda m: m.type == "error" and attempted.append(f"console error: {m.text}"))
    page.add_init_script(COUNT_EVENTS)
    page.goto(url)
    page.wait_for_function(f"document.querySelectorAll('[data-drawn=\"1\"]').length === {drawn}", timeout=20_000)
    return attempted


def opened_one(page, tmp_path, payload: dict) -> list[str]:
    """One view on a page, its script and style before it (the first view a kernel shows)."""
    return opened(page, tmp_path, page_html(assets_markup(), view_markup("attnviz-v", payload)))


def pixel(page, canvas: str, x: float, y: float) -> list[int]:
    return page.locator(canvas).evaluate(PIXEL, [x, y])


def cells(page, scope: str = "") -> dict:
    return json.loads(page.locator(f"{scope} canvas.map").get_attribute("data-cells"))


def cell_point(geometry: dict, r: int, c: int) -> tuple[float, float]:
    """The middle of query cell ``r`` x key cell ``c`` on the large map, in its canvas's CSS pixels."""
    return (
        geometry["left"] + (c - geometry["cols"][0] + 0.5) * geometry["cell"],
        geometry["top"] + (r - geometry["rows"][0] + 0.5) * geometry["cell"],
    )


def hover_cell(page, r: int, c: int, scope: str = "") -> str:
    geometry = cells(page, scope)
    box = page.locator(f"{scope} canvas.map").bounding_box()
    x, y = cell_point(geometry, r, c)
    page.mouse.move(box["x"] + x, box["y"] + y)
    tip = page.locator(f"{scope} .map-tip")
    tip.wait_for(state="visible")
    return tip.inner_text()


def assert_map_is(page, weights: np.ndarray, scope: str = "", step: int = 1, gamma: float = 1.0) -> int:
    """Every ``step``-th drawn cell of the large map shows the colour of its weight in ``weights`` (q, k) on the
    colour scale ``gamma``."""
    geometry = cells(page, scope)
    assert geometry["cell"] >= 3, geometry  # wide enough to read a cell's middle
    assert geometry["gamma"] == gamma
    levels = levels16(weights)
    checked = 0
    for r in range(*geometry["rows"], step):
        for c in range(*geometry["cols"], step):
            expected = colour_of(int(levels[r, c]), gamma)
            assert pixel(page, f"{scope} canvas.map", *cell_point(geometry, r, c)) == expected, (r, c)
            checked += 1
    return checked


def assert_grid_is(page, picture: dict, scope: str = "") -> int:
    """Every tile of the grid shows, at a visible cell of a causal tile (its last row), the palette colour of that
    cell's level in ``picture``'s PNG (the payload's grid at one colour scale)."""
    grid = page.locator(f"{scope} .attnviz-grid canvas")
    tiles = json.loads(grid.get_attribute("data-tiles"))
    levels = np.asarray(Image.open(io.BytesIO(base64.b64decode(picture["png"]))))
    palette = grid_palette()
    unit = tiles["w"] / picture["tw"]
    i, j = picture["th"] - 1, picture["tw"] // 3
    for r in range(tiles["rows"]):
        for c in range(tiles["cols"]):
            x = tiles["left"] + c * tiles["w"] + (j + 0.5) * unit
            y = tiles["top"] + r * tiles["h"] + (i + 0.5) * unit
            level = levels[r * picture["th"] + i, c * picture["tw"] + j]
            assert pixel(page, f"{scope} .attnviz-grid canvas", x, y) == [*palette[level].tolist(), 255], (r, c)
    return tiles["rows"] * tiles["cols"]


def emphasis(page):
    return page.get_by_role("button", name="√ weight")


def wait_gamma(page, gamma: float) -> None:
    page.wait_for_function(f"JSON.parse(document.querySelector('canvas.map').dataset.cells).gamma === {gamma}")


def test_drawn_offline_in_the_grids_colours_with_no_request(page, tmp_path):
    payload = hand_payload([hand_kind(WEIGHTS, TOKENS)])
    attempted = opened(page, tmp_path, page_html(view_markup("attnviz-one", payload), assets_markup()))
    view = page.locator("#attnviz-one")
    assert "script is missing" not in view.inner_text()  # the fallback text went
    assert page.evaluate("[window.__attnvizNotebookDraws, window.__heard]") == [1, ["attnviz-one"]]
    # the grid: every tile's middle cell in its level's colour (the palette of the grid's own PNG)
    assert assert_grid_is(page, payload["kinds"][0]["grid"]) == 2 * 4
    assert emphasis(page).get_attribute("aria-pressed") == "false"  # a payload with no gamma: by the weight
    # the large head: layer 0, head 0, every cell (the masked ones grey)
    assert "Layer 0" in view.locator(".head-title").inner_text()
    assert assert_map_is(page, WEIGHTS[0, 0]) == N * N
    assert page.locator(".stats").inner_text().split("\n")[1].split("\t") == ["max weight", "1"]
    # the head view: the grid beside the large head (the page is wide)
    grid_box, head_box = page.locator(".grid-pane").bounding_box(), page.locator(".head-pane").bounding_box()
    assert head_box["x"] >= grid_box["x"] + grid_box["width"] and head_box["y"] == grid_box["y"]
    assert attempted == []


def test_a_cell_hovered_names_its_query_key_and_weight(page, tmp_path):
    opened_one(page, tmp_path, hand_payload([hand_kind(WEIGHTS, TOKENS)]))
    for r, c in [(7, 3), (19, 19), (12, 0)]:
        lines = hover_cell(page, r, c).split("\n")
        assert lines == [
            f"query: {TOKENS[r]}",
            f"key: {TOKENS[c]}",
            f"weight: {levels16(WEIGHTS[0, 0])[r, c] / 65534:.4f}",
        ]
    assert hover_cell(page, 2, 9).split("\n")[2] == "weight: masked (no visible key)"


def test_a_click_on_the_grid_draws_that_head_large(page, tmp_path):
    opened_one(page, tmp_path, hand_payload([hand_kind(WEIGHTS, TOKENS)]))
    grid = page.locator(".attnviz-grid canvas")
    tiles = json.loads(grid.get_attribute("data-tiles"))
    box = grid.bounding_box()
    page.mouse.click(box["x"] + tiles["left"] + 2.5 * tiles["w"], box["y"] + tiles["top"] + 1.5 * tiles["h"])
    page.wait_for_function("document.querySelector('.head-title').textContent.includes('Head 2')")
    assert page.locator(".head-title").inner_text() == "self · Layer 1 · Head 2"
    assert assert_map_is(page, WEIGHTS[1, 2]) == N * N
    assert page.locator(".stats").inner_text().split("\n")[2].split("\t") == ["row mean", "2"]
    # the keyboard: the grid's own (an arrow moves, Enter opens)
    page.mouse.move(box["x"] + box["width"] + 40, box["y"] + box["height"] + 40)  # no tile under the pointer
    grid.focus()
    page.keyboard.press("ArrowRight")  # the first press shows the focus on the first tile
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Enter")
    page.wait_for_function("document.querySelector('.head-title').textContent.endsWith('Head 1')")
    assert page.locator(".head-title").inner_text() == "self · Layer 0 · Head 1"
    assert "sink" in page.locator(".stats").inner_text()
    # the mean's tile: the mean over the heads of each cell
    page.mouse.click(box["x"] + tiles["left"] + 3.5 * tiles["w"], box["y"] + tiles["top"] + 0.5 * tiles["h"])
    page.wait_for_function("document.querySelector('.head-title').textContent.endsWith('mean of the heads')")
    text = hover_cell(page, 5, 2)
    mean = levels16(WEIGHTS[0, :, 5, 2]).astype(np.float64).mean() / 65534
    assert text.split("\n")[2] == f"weight: {mean:.4f}"


def test_the_lines_view_toggles_and_a_hovered_token_keeps_only_its_lines(page, tmp_path):
    identity = np.where(np.eye(N, dtype=bool), 1.0, 0.0)[None, None].repeat(2, 0).repeat(3, 1)  # query i -> key i
    identity[..., np.triu(np.ones((N, N), dtype=bool), 1)] = np.nan
    opened_one(page, tmp_path, hand_payload([hand_kind(identity, TOKENS)]))
    assert page.locator("canvas.lines").is_hidden()
    page.get_by_role("button", name="Lines").click()
    page.locator("canvas.lines").wait_for(state="visible")
    assert page.locator("canvas.map").is_hidden()
    geometry = json.loads(page.locator("canvas.lines").get_attribute("data-lines"))
    middle = (geometry["leftX"] + geometry["rightX"]) / 2
    row_y = lambda i: 4 + (i + 0.5) * geometry["row"]  # noqa: E731
    drawn = lambda i: pixel(page, "canvas.lines", middle, row_y(i))[3] > 0  # noqa: E731
    assert all(drawn(i) for i in range(N))  # a horizontal line per token, at full weight
    box = page.locator("canvas.lines").bounding_box()
    page.mouse.move(box["x"] + geometry["leftX"] - 10, box["y"] + row_y(5))  # over query 5
    page.wait_for_function("document.querySelector('canvas.lines').dataset.focus === 'q5'")
    assert drawn(5) and not any(drawn(i) for i in range(N) if i != 5)
    page.mouse.move(box["x"] + geometry["rightX"] + 10, box["y"] + row_y(8))  # over key 8: its one line
    page.wait_for_function("document.querySelector('canvas.lines').dataset.focus === 'k8'")
    assert drawn(8) and not any(drawn(i) for i in range(N) if i != 8)
    page.mouse.move(box["x"] + box["width"] + 40, box["y"] + box["height"] + 40)  # away: every line again
    page.wait_for_function("document.querySelector('canvas.lines').dataset.focus === ''")
    assert all(drawn(i) for i in range(N))
    page.get_by_role("button", name="Map").click()
    page.locator("canvas.map").wait_for(state="visible")
    assert page.locator("canvas.lines").is_hidden()


def test_the_sentence_selector_restricts_the_rows_and_columns_drawn(page, tmp_path):
    split = 8  # sentence B starts at token 8
    full = causal_weights(2, 1, 2, N)[..., :, :]
    full[np.isnan(full)] = 0.0  # BertViz's pairs: every query sees both sentences (weights need not sum to 1 here)
    kind = hand_kind(full, TOKENS, sentence_b=split)
    opened_one(page, tmp_path, hand_payload([kind]))
    assert cells(page)["rows"] == [0, N] and cells(page)["cols"] == [0, N]
    for name, rows, cols in [
        ("A→B", [0, split], [split, N]),
        ("B→A", [split, N], [0, split]),
        ("B→B", [split, N], [split, N]),
    ]:
        page.get_by_role("button", name=name, exact=True).click()
        page.wait_for_function(f"JSON.parse(document.querySelector('canvas.map').dataset.cells).rows[0] === {rows[0]}")
        geometry = cells(page)
        assert (geometry["rows"], geometry["cols"]) == (rows, cols), name
        assert assert_map_is(page, full[0, 0]) == (rows[1] - rows[0]) * (cols[1] - cols[0])
        lines = hover_cell(page, rows[0], cols[0]).split("\n")
        assert lines[:2] == [f"query: {TOKENS[rows[0]]}", f"key: {TOKENS[cols[0]]}"]
    page.get_by_role("button", name="Lines").click()  # the lines keep the same part: B's queries over B's keys
    page.locator("canvas.lines").wait_for(state="visible")
    geometry = json.loads(page.locator("canvas.lines").get_attribute("data-lines"))
    assert (geometry["queries"], geometry["keys"]) == ([split, N], [split, N])
    page.get_by_role("button", name="All", exact=True).click()
    page.wait_for_function("JSON.parse(document.querySelector('canvas.lines').dataset.lines).queries[0] === 0")


def test_an_encoder_decoders_three_kinds_each_over_its_own_tokens(page, tmp_path):
    source = [f"{i} src{i}" for i in range(12)]
    target = [f"{i} tgt{i}" for i in range(7)]
    encoder = causal_weights(3, 2, 2, 12)
    encoder[np.isnan(encoder)] = 0.0
    decoder = causal_weights(4, 2, 2, 7)
    cross = np.random.default_rng(5).dirichlet(np.ones(12), (2, 2, 7))  # (layer, head, target, source)
    kinds = [
        hand_kind(encoder, source, kind_id="encoder", title="Encoder"),
        hand_kind(decoder, target, kind_id="decoder", title="Decoder"),
        hand_kind(cross, target, source, kind_id="cross", title="Cross", selected=(1, 1)),
    ]
    opened_one(page, tmp_path, hand_payload(kinds))
    assert page.locator(".kinds button").all_inner_texts() == ["Encoder", "Decoder", "Cross"]
    assert page.locator(".head-title").inner_text() == "Encoder · Layer 0 · Head 0"
    page.get_by_role("button", name="Cross").click()
    page.wait_for_function("document.querySelector('.head-title').textContent.startsWith('Cross')")
    assert page.locator(".head-title").inner_text() == "Cross · Layer 1 · Head 1"  # its own first head
    geometry = cells(page)
    assert (geometry["rows"], geometry["cols"]) == ([0, 7], [0, 12])
    assert assert_map_is(page, cross[1, 1]) == 7 * 12
    assert hover_cell(page, 6, 11).split("\n")[:2] == ["query: 6 tgt6", "key: 11 src11"]
    tiles = json.loads(page.locator(".attnviz-grid canvas").get_attribute("data-tiles"))
    assert (tiles["rows"], tiles["cols"]) == (2, 3)  # the cross kind's grid: 2 layers x (2 heads + the mean)


def test_two_outputs_and_two_copies_of_the_script_on_one_page(page, tmp_path):
    """A notebook of two views, each saved with the script (html_action="return"): both drawn, once each, and a
    click on one leaves the other as it was."""
    one = hand_payload([hand_kind(WEIGHTS, TOKENS)], title="first")
    two = hand_payload([hand_kind(WEIGHTS[:, :2, :9, :9], TOKENS[:9])], title="second", theme="dark")
    html = page_html(assets_markup(), view_markup("attnviz-1", one), assets_markup(), view_markup("attnviz-2", two))
    opened(page, tmp_path, html, drawn=2)
    assert page.evaluate("[window.__attnvizNotebookDraws, window.__heard]") == [2, ["attnviz-1", "attnviz-2"]]
    assert page.evaluate(
        "document.querySelector('#attnviz-1').__attnvizNb !== document.querySelector('#attnviz-2').__attnvizNb"
    )
    page.evaluate("window.attnvizNotebook.drain()")  # again: nothing is drawn twice
    assert page.evaluate("window.__attnvizNotebookDraws") == 2
    grid = page.locator("#attnviz-2 .attnviz-grid canvas")
    tiles = json.loads(grid.get_attribute("data-tiles"))
    box = grid.bounding_box()
    page.mouse.click(box["x"] + tiles["left"] + 1.5 * tiles["w"], box["y"] + tiles["top"] + 1.5 * tiles["h"])
    page.wait_for_function("document.querySelector('#attnviz-2 .head-title').textContent.endsWith('Head 1')")
    assert page.locator("#attnviz-1 .head-title").inner_text() == "self · Layer 0 · Head 0"
    assert assert_map_is(page, WEIGHTS[1, 1, :9, :9], scope="#attnviz-2") == 81
    assert assert_map_is(page, WEIGHTS[0, 0], scope="#attnviz-1") == N * N
    # the dark one: light text on a dark background; the light one the other way round
    colours = page.evaluate(
        "['#attnviz-1', '#attnviz-2'].map(id => { const s = getComputedStyle(document.querySelector(id)); "
        "return [s.color, s.backgroundColor]; })"
    )
    assert colours == [["rgb(49, 51, 63)", "rgb(255, 255, 255)"], ["rgb(250, 250, 250)", "rgb(14, 17, 23)"]]


def test_a_long_texts_pooled_map_names_the_tokens_each_cell_holds(page, tmp_path):
    n_tokens, bin_size = 2000, 8
    pooled = causal_weights(6, 2, 2, n_tokens // bin_size)  # the view's cells: 250 a side, 8 tokens each
    words = [f"{i} w{i}" for i in range(n_tokens)]
    payload = hand_payload([hand_kind(pooled, words, bin_size=bin_size)], view="model")
    opened_one(page, tmp_path, payload)
    assert page.get_by_role("button", name="Lines").count() == 0  # no lines for a pooled map
    geometry = cells(page)
    assert (geometry["rows"], geometry["cols"]) == ([0, 250], [0, 250])
    assert geometry["cell"] >= 2
    lines = hover_cell(page, 100, 37).split("\n")
    weight = levels16(pooled[0, 0])[100, 37] / 65534
    assert lines == [f"queries 800–807 × keys 296–303: max {weight:.4f}", "800 w800 … 807 w807", "296 w296 … 303 w303"]
    # the model view: the grid on top, at its full width, the head below it
    grid_box = page.locator(".grid-pane").bounding_box()
    head_box = page.locator(".head-pane").bounding_box()
    assert head_box["y"] >= grid_box["y"] + grid_box["height"]


def test_a_real_records_view_as_the_payload_builder_makes_it(page, tmp_path):
    """The embedded model's capture of a short text, through attnviz.notebook.payload.view_payload: drawn, its large
    head in the colours of the record's own weights, its hover naming the record's tokens."""
    from attnviz.models.embedded.config import EmbeddedConfig
    from attnviz.models.registry import EMBEDDED, SourceSpec, open_source
    from attnviz.notebook.payload import Kind, view_payload

    source = open_source(SourceSpec(EMBEDDED, config=EmbeddedConfig(d_model=16, n_head=2, n_layer=2, causal=True)))
    record = source.run("the cat sat on the mat because it was warm", 64)
    payload = view_payload([Kind("self", record, selected=(1, 1))], title="embedded", note="a capture")
    kind = payload["kinds"][0]
    assert (kind["maps"]["bin_q"], kind["maps"]["bin_k"]) == (1, 1)  # a short text: one weight a cell
    opened_one(page, tmp_path, payload)
    words = payload["words"]
    assert page.locator(".head-title").inner_text() == f"{kind['title']} · {words['layer']} 1 · H1"
    weights = record.pooled_grid("max")[1, 1].double().numpy()  # (q, k), NaN where masked
    n = len(kind["queries"])
    assert assert_map_is(page, weights) == n * n
    r, c = n - 1, n // 2
    lines = hover_cell(page, r, c).split("\n")
    assert lines[0].endswith(kind["queries"][r]) and lines[1].endswith(kind["keys"][c])
    assert lines[2].endswith(f"{round(weights[r, c] * 65534) / 65534:.4f}")


def test_at_gamma_half_every_cell_is_in_the_colour_of_its_square_root(page, tmp_path):
    """A payload whose first scale is √weight (a long text's, or gamma=0.5): opened with the toggle on, every cell
    in the colour of level min(254, round(255 * √w)), the grid at the same scale, the hover still the weight."""
    kind = hand_kind(WEIGHTS, TOKENS, gamma=0.5)
    opened_one(page, tmp_path, hand_payload([kind], gamma=0.5))
    assert emphasis(page).get_attribute("aria-pressed") == "true"
    assert assert_map_is(page, WEIGHTS[0, 0], gamma=0.5) == N * N
    assert assert_grid_is(page, kind["grids"]["0.5"]) == 2 * 4
    assert hover_cell(page, 7, 3).split("\n")[2] == f"weight: {levels16(WEIGHTS[0, 0])[7, 3] / 65534:.4f}"


def test_the_toggle_swaps_the_grid_and_the_map_and_keeps_the_head(page, tmp_path):
    other = causal_weights(9, 2, 3, N)
    kinds = [hand_kind(WEIGHTS, TOKENS, title="One"), hand_kind(other, TOKENS, kind_id="decoder", title="Two")]
    opened_one(page, tmp_path, hand_payload(kinds))
    grid = page.locator(".attnviz-grid canvas")
    tiles = json.loads(grid.get_attribute("data-tiles"))
    box = grid.bounding_box()
    page.mouse.click(box["x"] + tiles["left"] + 2.5 * tiles["w"], box["y"] + tiles["top"] + 1.5 * tiles["h"])
    page.wait_for_function("document.querySelector('.head-title').textContent.endsWith('Head 2')")
    page.mouse.move(box["x"] + box["width"] + 40, box["y"] + box["height"] + 40)  # no tile under the pointer
    grid.focus()
    page.keyboard.press("ArrowRight")  # the keyboard's focus on tile (0, 0), then (0, 1)
    page.keyboard.press("ArrowRight")
    focus_box = page.locator(".attnviz-grid .focus").bounding_box()
    draws = int(grid.get_attribute("data-draws"))
    emphasis(page).click()
    wait_gamma(page, 0.5)
    page.wait_for_function(f"document.querySelector('.attnviz-grid canvas').dataset.draws === '{draws + 1}'")
    assert emphasis(page).get_attribute("aria-pressed") == "true"
    assert page.locator(".head-title").inner_text() == "One · Layer 1 · Head 2"  # the same head, on the new scale
    assert assert_map_is(page, WEIGHTS[1, 2], gamma=0.5) == N * N
    assert assert_grid_is(page, kinds[0]["grids"]["0.5"]) == 2 * 4
    assert page.locator(".attnviz-grid .focus").bounding_box() == focus_box  # the focused tile kept
    page.get_by_role("button", name="Two").click()  # another kind: the same scale
    page.wait_for_function("document.querySelector('.head-title').textContent.startsWith('Two')")
    assert emphasis(page).get_attribute("aria-pressed") == "true"
    assert assert_map_is(page, other[0, 0], gamma=0.5) == N * N
    assert assert_grid_is(page, kinds[1]["grids"]["0.5"]) == 2 * 4
    emphasis(page).click()  # and back: by the weight again
    wait_gamma(page, 1)
    assert emphasis(page).get_attribute("aria-pressed") == "false"
    assert assert_map_is(page, other[0, 0]) == N * N
    assert assert_grid_is(page, kinds[1]["grids"]["1.0"]) == 2 * 4


def test_the_lines_are_drawn_on_the_same_scale(page, tmp_path):
    quarter = np.where(np.eye(N, dtype=bool), 0.25, 0.0)[None, None].repeat(2, 0).repeat(3, 1)  # query i -> key i
    opened_one(page, tmp_path, hand_payload([hand_kind(quarter, TOKENS)]))
    page.get_by_role("button", name="Lines").click()
    page.locator("canvas.lines").wait_for(state="visible")
    geometry = json.loads(page.locator("canvas.lines").get_attribute("data-lines"))
    middle = (geometry["leftX"] + geometry["rightX"]) / 2
    alpha = lambda i: pixel(page, "canvas.lines", middle, 4 + (i + 0.5) * geometry["row"])[3]  # noqa: E731
    # a horizontal line 2 px wide over whole pixels: its opacity is the line's, within one 8-bit step
    assert all(abs(alpha(i) - 255 * 0.25) <= 1 for i in range(N))
    emphasis(page).click()
    page.wait_for_function("JSON.parse(document.querySelector('canvas.lines').dataset.lines).gamma === 0.5")
    assert all(abs(alpha(i) - 255 * 0.5) <= 1 for i in range(N))  # √0.25


def scale_of(page) -> dict:
    return json.loads(page.locator("canvas.map").get_attribute("data-scale"))


def assert_ticks_on_their_colours(page, gamma: float) -> dict:
    """The colour bar's ticks: 0.25 among them, each drawn on the bar where its weight's colour is, none touching."""
    scale = scale_of(page)
    palette = grid_palette()
    by_weight = {tick["weight"]: tick for tick in scale["ticks"]}
    assert by_weight[0.25]["level"] == round(255 * 0.25**gamma)
    assert {0, 0.25, 0.5, 1} <= set(by_weight)
    for tick in scale["ticks"]:
        expected = [*palette[min(254, round(255 * tick["weight"] ** gamma))].tolist(), 255]
        assert pixel(page, "canvas.map", tick["x"], tick["y"]) == expected, tick
    along = sorted(tick["y"] if scale.get("vertical") else tick["x"] for tick in scale["ticks"])
    assert min(b - a for a, b in itertools.pairwise(along)) >= 13  # a label's height (11 px text) apart, or more
    return scale


def test_the_colour_bar_names_weights_at_their_colours(page, tmp_path):
    opened_one(page, tmp_path, hand_payload([hand_kind(WEIGHTS, TOKENS)]))
    geometry = cells(page)
    scale = assert_ticks_on_their_colours(page, 1.0)
    assert scale["vertical"] and scale["x"] >= geometry["left"] + N * geometry["cell"]  # beside the map
    assert scale["h"] >= 256  # every level a pixel or more
    gamma1 = {tick["weight"] for tick in scale["ticks"]}
    emphasis(page).click()
    wait_gamma(page, 0.5)
    scale = assert_ticks_on_their_colours(page, 0.5)
    assert {tick["weight"] for tick in scale["ticks"]} > gamma1  # √ spreads the small weights apart: more named
    # a narrow cell: the bar under the map, across it
    page.set_viewport_size({"width": 320, "height": 900})
    page.wait_for_function("!JSON.parse(document.querySelector('canvas.map').dataset.scale).vertical")
    geometry = cells(page)
    scale = assert_ticks_on_their_colours(page, 0.5)
    assert scale["y"] >= geometry["top"] + N * geometry["cell"] and scale["w"] >= 256


def test_a_real_record_shown_at_gamma_half(page, tmp_path):
    """view_payload(gamma=0.5) on the embedded model's capture: the toggle on, each cell the colour of √weight."""
    from attnviz.models.embedded.config import EmbeddedConfig
    from attnviz.models.registry import EMBEDDED, SourceSpec, open_source
    from attnviz.notebook.payload import Kind, view_payload

    source = open_source(SourceSpec(EMBEDDED, config=EmbeddedConfig(d_model=16, n_head=2, n_layer=2, causal=True)))
    record = source.run("the cat sat on the mat because it was warm", 64)
    payload = view_payload([Kind("self", record)], title="embedded", gamma=0.5)
    assert payload["gamma"] == 0.5 and payload["kinds"][0]["grid"] == payload["kinds"][0]["grids"]["0.5"]
    opened_one(page, tmp_path, payload)
    assert emphasis(page).get_attribute("aria-pressed") == "true"
    weights = record.pooled_grid("max")[0, 0].double().numpy()
    n = len(payload["kinds"][0]["queries"])
    assert assert_map_is(page, weights, gamma=0.5) == n * n
    assert assert_grid_is(page, payload["kinds"][0]["grids"]["0.5"]) == 2 * 3
    assert_ticks_on_their_colours(page, 0.5)

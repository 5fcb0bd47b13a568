"""The Corpus page in a real headless Chromium: a run folder opened draws its heads, and a click on a point
chooses that head."""

import re

import pytest

from attnviz.labs.corpus import CorpusRun, run_corpus
from attnviz.models.registry import embedded_spec, open_source
from tests.integration.chromium import assert_no_exception
from tests.integration.pages.test_corpus_page import SAMPLE
from tools.browser import wait_for_charts, wait_until_idle

pytestmark = pytest.mark.browser


def test_a_point_clicked_chooses_that_head(server, page, tmp_path):
    """A tiny run of the embedded model (2 layers x 4 heads) over 4 texts; its folder typed on the page; the point
    under the mouse (its hover names it) clicked: the Head picker and the top texts follow."""
    out = tmp_path / "run"
    run_corpus(open_source(embedded_spec("cpu")), SAMPLE, out, max_tokens=32, limit=4, probe=False)
    page.goto(f"{server}/corpus")
    wait_until_idle(page)
    folder = page.locator('input[aria-label^="Run folder"]')
    folder.fill(str(out))
    folder.press("Enter")
    wait_until_idle(page)
    wait_for_charts(page, 2)  # the scatter and the chosen head on its first top text
    assert_no_exception(page)
    points = page.locator(".js-plotly-plot").first.locator(".scatterlayer .trace").first.locator("path.point")
    assert points.count() == len(CorpusRun.open(out).summary["heads"]) == 8
    # the point farthest right but the first (L0 H0, chosen before any click): no other point's hover area on it
    boxes = [points.nth(i).bounding_box() for i in range(points.count())]
    right = max(range(1, len(boxes)), key=lambda i: boxes[i]["x"])
    x, y = boxes[right]["x"] + boxes[right]["width"] / 2, boxes[right]["y"] + boxes[right]["height"] / 2
    page.mouse.move(x, y)
    hover = page.locator(".hoverlayer .hovertext").first
    hover.wait_for(timeout=10_000)
    name = re.match(r"L\d+ H\d+", hover.text_content()).group(0)  # the hover's first line: "L1 H2"
    assert name != "L0 H0"
    page.mouse.click(x, y)
    page.wait_for_function(  # the Head picker chose it: the top texts' picker is labelled with it
        "label => [...document.querySelectorAll('[data-testid=stSelectbox]')].some(s => s.textContent === label)",
        arg=f"Draw {name} on text",
        timeout=30_000,
    )
    wait_until_idle(page)
    assert_no_exception(page)
    caption = page.get_by_text(f"texts where {name}'s", exact=False)
    assert caption.count() == 1, name

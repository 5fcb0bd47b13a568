"""``streamlit run serve.py``: the app warmed at start, as ``make run`` and the container image serve it, and Streamlit's
own files gzipped, its page asking for the first screen's chunks early."""

import gzip
import re
import urllib.error
import urllib.request

import pytest

from attnviz.app.static_assets import FIRST_SCREEN, INDEX, MIN_BYTES, PLOTLY, chunk_file, streamlit_static_dir
from tests.integration.browser.test_browser import assert_sidebar_kept_its_defaults
from tests.integration.chromium import NO_TOUR_WARM, assert_no_exception
from tools.browser import ROOT, choose_page, streamlit_server, wait_for_charts, wait_for_grid, wait_until_idle

pytestmark = pytest.mark.browser


def _log(url: str) -> str:
    port = url.rsplit(":", 1)[1]
    return (ROOT / ".pytest_cache" / f"streamlit-{port}.log").read_text()


def test_a_warmed_server_has_loaded_the_default_model_before_its_first_visitor(browser):
    with streamlit_server(timeout=300.0, script="serve.py", env=NO_TOUR_WARM) as url:
        before = _log(url)
        assert "attnviz: warmed up in" in before
        assert len(re.findall(r"attnviz: loaded .*\[embedded", before)) == 1, before
        context = browser.new_context(viewport={"width": 1400, "height": 1600})
        page = context.new_page()
        page.goto(f"{url}/heads")  # a shared link: the first session of this server
        wait_for_charts(page, 2)  # the large view and the statistics (the grid is the page's own canvas)
        wait_until_idle(page)
        assert_no_exception(page)
        assert_sidebar_kept_its_defaults(page)
        context.close()
        # the visitor's page used the model the warm-up loaded: no second load of it
        assert len(re.findall(r"attnviz: loaded .*\[embedded", _log(url))) == 1


# Streamlit's files through serve.py's middleware (attnviz.app.static_serving), on one server for these tests:
# compressed once when asked for gzip, as Streamlit ships them otherwise, and its page asking for the first
# screen's chunks while it loads. HTTP requests open no session: the browser test below is still a first visitor.


@pytest.fixture(scope="module")
def served():
    with streamlit_server(timeout=300.0, script="serve.py", env=NO_TOUR_WARM) as url:
        yield url


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as err:  # a 304 is an "error" to urllib
        return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()


def _static_files() -> dict[str, bytes]:
    """The Plotly chunk, Streamlit's entry module and its style sheet: the URL path -> the bytes on disk."""
    static = streamlit_static_dir()
    page = (static / INDEX).read_text()
    entry = re.search(r'<script type="module" crossorigin src="\./(static/js/[^"]+)"', page).group(1)
    css = re.search(r'<link rel="stylesheet" crossorigin href="\./(static/css/[^"]+)"', page).group(1)
    plotly = f"static/js/{chunk_file(static / 'static' / 'js', PLOTLY)}"
    return {path: (static / path).read_bytes() for path in (plotly, entry, css)}


def test_streamlits_scripts_leave_gzipped_when_asked_and_as_they_are_otherwise(served):
    for path, data in _static_files().items():
        status, headers, body = fetch(f"{served}/{path}", {"Accept-Encoding": "gzip, deflate, br"})
        assert status == 200 and headers["content-encoding"] == "gzip", (path, headers)
        assert gzip.decompress(body) == data and int(headers["content-length"]) == len(body) < len(data) / 2, path
        assert headers["vary"] == "Accept-Encoding" and "immutable" in headers["cache-control"], (path, headers)
        status, again, body = fetch(f"{served}/{path}", {"Accept-Encoding": "gzip", "If-None-Match": headers["etag"]})
        assert (status, body) == (304, b"") and again["etag"] == headers["etag"], path
        status, plain, body = fetch(f"{served}/{path}")  # no Accept-Encoding: the file itself
        assert status == 200 and "content-encoding" not in plain and body == data, path
        assert plain["vary"] == "Accept-Encoding" and plain["etag"] != headers["etag"], (path, plain)
        status, part, body = fetch(f"{served}/{path}", {"Accept-Encoding": "gzip", "Range": "bytes=0-99"})
        assert status == 206 and body == data[:100] and "content-encoding" not in part, path


def test_the_page_preloads_existing_chunks_of_the_first_screen_and_evaluates_plotly_early(served):
    js = streamlit_static_dir() / "static" / "js"
    plotly = chunk_file(js, PLOTLY)
    for path in ("/", "/heads", "/tokens?text=a+b"):  # the root and any page's URL: Streamlit's page
        status, headers, body = fetch(f"{served}{path}", {"Accept-Encoding": "gzip"})
        assert status == 200 and headers["content-encoding"] == "gzip" and headers["cache-control"] == "no-cache"
        page = gzip.decompress(body).decode()
        status, plain, body = fetch(f"{served}{path}")
        assert status == 200 and body.decode() == page and "content-encoding" not in plain
        hrefs = re.findall(r'<link rel="modulepreload" crossorigin href="\./static/js/([^"]+)"', page)
        # Plotly's chunk is not in the page's list: the page's own script asks for it (on the Heads page once its
        # grid's canvas has drawn the first map), and evaluates it early
        assert len(hrefs) == len(set(hrefs)) and plotly not in hrefs, hrefs
        assert f'"{plotly}"' in page and f'import("./static/js/{plotly}")' in page and "attnviz:first-map" in page
        for element in FIRST_SCREEN:
            if element != PLOTLY:
                assert chunk_file(js, element) in hrefs, element
    for href in [*hrefs, plotly]:  # every module it names is served
        status, _, body = fetch(f"{served}/static/js/{href}", {"Accept-Encoding": "gzip"})
        assert status == 200 and body, href


def test_a_first_visitor_fetches_plotly_once_gzipped_and_sees_the_page_work(browser, served):
    context = browser.new_context(viewport={"width": 1400, "height": 1600})
    page = context.new_page()
    errors, plotly, plain = [], [], []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.on("request", lambda req: plotly.append(req.url) if f"/{PLOTLY}." in req.url else None)

    def check_encoding(response) -> None:
        script = "/static/" in response.url and response.url.endswith((".js", ".css")) and response.status == 200
        if script and response.header_value("content-encoding") != "gzip" and len(response.body()) >= MIN_BYTES:
            plain.append(response.url)

    page.on("response", check_encoding)
    page.goto(f"{served}/heads")
    wait_for_charts(page, 2)
    wait_until_idle(page)
    assert_no_exception(page)
    assert_sidebar_kept_its_defaults(page)
    # the preload, the early import and Streamlit's own import of the chunk: one request, not two or three
    assert len(plotly) == 1, plotly
    assert plain == [], plain
    assert page.locator(".js-plotly-plot").count() >= 2
    assert int(wait_for_grid(page).get_attribute("data-draws")) >= 1  # and the grid, drawn by its canvas
    context.close()
    assert not errors, errors


# when the page's script run starts and ends, and when Plotly's bundle has been evaluated (its last statement sets
# window.Plotly), in the page's clock
TIMES = """
window.__times = {};
new MutationObserver(() => {
  const state = document.querySelector('[data-test-script-state]')?.getAttribute('data-test-script-state');
  if (state === 'running') window.__times.running ??= performance.now();
  if (state === 'notRunning' && window.__times.running) window.__times.ran ??= performance.now();
}).observe(document, {subtree: true, childList: true, attributes: true});
let plotly;
Object.defineProperty(window, 'Plotly', {configurable: true, get: () => plotly, set: value => {
  plotly = value;
  window.__times.plotly ??= performance.now();
}});
"""


def test_the_home_page_is_drawn_before_plotly_is_evaluated_for_the_next_page(browser, served):
    context = browser.new_context(viewport={"width": 1400, "height": 1600})
    context.add_init_script(TIMES)
    page = context.new_page()
    errors, plotly = [], []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.on("request", lambda req: plotly.append(req.url) if f"/{PLOTLY}." in req.url else None)
    page.goto(served)  # the Overview: no chart
    wait_until_idle(page)
    page.wait_for_function("() => window.__times.plotly !== undefined", timeout=120_000)
    times = page.evaluate("window.__times")
    assert times["running"] < times["ran"] < times["plotly"], times  # evaluated once the page was drawn
    assert page.locator(".js-plotly-plot").count() == 0
    choose_page(page, "Heads")
    wait_for_charts(page, 2)
    assert_no_exception(page)
    assert len(plotly) == 1, plotly  # the next page's charts used the chunk the home page had evaluated
    context.close()
    assert not errors, errors

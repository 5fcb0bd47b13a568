"""Streamlit's own files (its page and scripts) as ``serve.py`` sends them: gzipped once, the first screen asked early.

Streamlit's server sends its static files uncompressed (its gzip middleware skips ``/static/`` and the page:
9.4 MB for a first visit, 3.0 MB gzipped), and its page asks for an element's chunk only when the element first
arrives: for the 4.7 MB Plotly chunk, when the first chart does. A new visitor waited for the page, then the
app, then the chart, then Plotly's download, then its evaluation, one after the other.
:class:`StaticAssets` holds what :class:`attnviz.app.static_serving.StaticCompression` sends instead:

- every compressible file of Streamlit's static folder gzipped once (at the server's start, or at its first
  request), each variant with its own ETag;
- the page (``index.html``) with ``<link rel="modulepreload">`` for the chunks of the elements a new visitor's
  first screen draws (:data:`FIRST_SCREEN`, Plotly's among them) and the modules they import, fetched and
  compiled while the page loads, and a module script that evaluates Plotly while the server runs the page
  (:func:`with_early_modules`).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import mimetypes
import re
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

GZIP_LEVEL = 6  # level 9 takes 1.7x as long for the Plotly chunk, to save 0.2 % of it
MIN_BYTES = 512  # smaller files gain less than a packet from gzip (the threshold Streamlit's own gzip uses)
COMPRESSIBLE = frozenset({".js", ".mjs", ".css", ".html", ".json", ".svg", ".map", ".txt"})
INDEX = "index.html"
PLOTLY = "PlotlyChart"
# the elements a new visitor's first screen draws (the sidebar, then the Heads page above its first chart, the grid
# a Components v2 component: BidiComponent), by the name of their chunk in Streamlit's build; Plotly's last: the
# largest by far, asked for by the page's own script (see _EARLY_PLOTLY), not in the page's list
FIRST_SCREEN = ("Selectbox", "TextArea", "NumberInput", "Checkbox", "TextInput", "Radio", "BidiComponent", PLOTLY)
CHARTLESS = ("", "overview")  # the root and the Overview (attnviz.app.navigation.HOME) draw no chart
# pages whose first map is attnviz's own canvas (attnviz.app.grid_canvas): Plotly after it, not before
MAP_FIRST = ("heads",)
# a classic script put first in the page's <head>: each Plotly chart drawn once on its first render, not twice
PLOTLY_ONCE = Path(__file__).with_name("plotly_once.js")
IMMUTABLE_MAX_AGE_S = 365 * 24 * 60 * 60  # Streamlit's own for its hashed files (STATIC_ASSET_CACHE_MAX_AGE_SECONDS)
_NO_CACHE = re.compile(r"(?:\.html$|^manifest\.json$)")  # Streamlit's: the page and the manifest are revalidated

# a minified ES module begins with its static imports: `import{a as b}from"./x.js";import"./y.js";`
_IMPORT = re.compile(r"""\s*import\s*(?:[\w$*{}\s,]+?\s*from\s*)?["'](\./[^"']+\.js)["']\s*;?""")
_MODULE_PRELOAD = re.compile(r"""<link\s+rel="modulepreload"[^>]*\shref="\./static/js/([^"]+)\"""")
_EARLY_PLOTLY = """
<script type="module">
  // attnviz (attnviz.app.static_assets): Plotly fetched and evaluated when it keeps a visitor waiting least
  const page = location.pathname.split("/").filter(Boolean).pop() ?? "";
  const chartless = CHARTLESS.includes(page);
  const mapFirst = MAP_FIRST.includes(page);
  const fetchPlotly = () => CLOSURE.forEach((name) => {
    const link = Object.assign(document.createElement("link"), { rel: "modulepreload", href: `./static/js/${name}` });
    link.crossOrigin = "";
    document.head.append(link);
  });
  const plotly = () => import("./static/js/CHUNK");
  const idle = (run) => ("requestIdleCallback" in window ? requestIdleCallback(run) : setTimeout(run, 500));
  const whenScript = (ready, run) => { // run() once the server has run the page and ready(its state)
    let ran = false;
    new MutationObserver((_, observer) => {
      const state = document.querySelector("[data-test-script-state]")?.getAttribute("data-test-script-state");
      ran ||= state === "running";
      if (!ran || !ready(state)) return;
      observer.disconnect();
      run();
    }).observe(document, { subtree: true, childList: true, attributeFilter: ["data-test-script-state"] });
  };
  if (mapFirst) {
    // the first map is attnviz's own canvas (attnviz.app.grid_canvas): nothing of Plotly's before it is drawn,
    // then Plotly fetched and evaluated for the charts below it (or once the page ran, if it drew no map)
    let started = false;
    const start = () => { if (!started) { started = true; fetchPlotly(); idle(plotly); } };
    addEventListener("attnviz:first-map", start, { once: true });
    whenScript((state) => state === "notRunning", () => idle(start));
  } else {
    fetchPlotly(); // with the page's own modules
    whenScript((state) => !chartless || state === "notRunning", () => (chartless ? idle(plotly) : setTimeout(plotly, 0)));
  }
</script>"""
_ENTRY = re.compile(r"""<script\s+type="module"[^>]*\ssrc="\./static/js/([^"]+)\"""")


@dataclass(frozen=True)
class Encoded:
    """One file as sent: its bytes (gzip or identity), their ETag and the headers that describe them."""

    body: bytes
    etag: str
    media_type: str
    cache_control: str
    gzip: bool


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an ``Accept-Encoding`` header allows gzip (RFC 9110: ``gzip;q=0`` refuses it; ``*`` covers it)."""
    named: dict[str, float] = {}
    for part in accept_encoding.split(","):
        coding, _, params = part.strip().partition(";")
        coding = coding.strip().lower()
        if not coding:
            continue
        q = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        named[coding] = q
    if "gzip" in named:
        return named["gzip"] > 0
    if "x-gzip" in named:
        return named["x-gzip"] > 0
    return named.get("*", 0.0) > 0


def etag_matches(if_none_match: str, etag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``etag`` (weak comparison, as RFC 9110 asks for GET)."""
    bare = etag.removeprefix("W/")
    return any(tag == "*" or tag.removeprefix("W/") == bare for tag in (t.strip() for t in if_none_match.split(",")))


def static_imports(source: str) -> list[str]:
    """The relative paths (``./x.js``) a minified ES module imports statically, in order: the imports it opens with."""
    paths, position = [], 0
    while match := _IMPORT.match(source, position):
        paths.append(match.group(1))
        position = match.end()
    return paths


def import_closure(js_dir: Path, name: str) -> list[str]:
    """``name`` and every module it imports statically, at any depth (file names in ``js_dir``), ``name`` first."""
    order, todo = [], [name]
    while todo:
        current = todo.pop(0)
        if current in order or not (js_dir / current).is_file():
            continue
        order.append(current)
        text = (js_dir / current).read_text(encoding="utf-8", errors="replace")
        todo.extend(path.removeprefix("./") for path in static_imports(text))
    return order


def chunk_file(js_dir: Path, element: str) -> str | None:
    """The file name of Streamlit's chunk for ``element`` (``PlotlyChart`` -> ``PlotlyChart.<hash>.js``), or None
    when this build has not exactly one."""
    pattern = re.compile(rf"{re.escape(element)}\.[\w-]+\.js")
    names = [path.name for path in js_dir.glob(f"{element}.*.js") if pattern.fullmatch(path.name)]
    return names[0] if len(names) == 1 else None


def with_early_modules(
    index_html: str,
    js_dir: Path,
    elements: Iterable[str] = FIRST_SCREEN,
    chartless: Iterable[str] = CHARTLESS,
    map_first: Iterable[str] = MAP_FIRST,
) -> str:
    """Streamlit's page, told to fetch the chunks of ``elements`` with itself, and when to fetch and evaluate Plotly's.

    Streamlit's page preloads its own modules; an element's chunk (a widget, a chart) it asks for only when the
    element first arrives, then the modules that chunk imports, then theirs: a round trip each, after the app
    has started. The ``<link rel="modulepreload">`` added here name each element's chunk and what it imports at
    any depth (not what the page lists already), in ``elements``' order, after Streamlit's own: the browser asks
    in document order, the app's modules first, and compiles them off the main thread as they arrive.

    Plotly's chunk (4.7 MB; 1.4 MB gzipped) is the exception: the module script added here asks for it. Evaluating
    it takes the browser's main thread for a second or more; Streamlit does it when the first chart arrives, before
    drawing it. On a page whose first map is attnviz's own canvas (``map_first``: the last segment of its URL path)
    nothing of Plotly's is fetched or evaluated before that map is drawn (the canvas says so with the window event
    ``attnviz:first-map``), or before the page has run when it drew none: on a hosted visitor's line the chunk would
    share the bandwidth with the page's own modules, and its evaluation would hold the map back. On any other page
    the chunk is fetched with the page, and evaluated as soon as the server runs the page
    (``data-test-script-state="running"``, the app's own marker), while the browser waits for its messages; on a
    page that draws no chart (``chartless``, ``""`` for the root) only once that page is drawn and the browser
    idle, so that the page is not kept waiting for it, and its reader's next page has Plotly ready. Its
    ``import()`` is the one Streamlit makes for a chart, the same URL: the browser evaluates the chunk once, and
    Streamlit finds it ready.

    Streamlit draws every Plotly chart twice when it first renders it (its element hands Plotly a themed copy
    of the figure it has just drawn, equal but new objects); the classic script put first (``plotly_once.js``)
    makes Plotly see the copy as the figure it drew, so the second call draws nothing.

    Returns the page unchanged when its entry module is not where Streamlit 1.67 puts it."""
    entry = _ENTRY.search(index_html)
    if entry is None or "</head>" not in index_html:
        return index_html
    listed = {entry.group(1), *_MODULE_PRELOAD.findall(index_html)}
    plotly = chunk_file(js_dir, PLOTLY) if PLOTLY in elements else None
    preloads: list[str] = []
    for element in elements:
        if element != PLOTLY and (chunk := chunk_file(js_dir, element)) is not None:
            preloads += [name for name in import_closure(js_dir, chunk) if name not in listed and name not in preloads]
    lines = [f'<link rel="modulepreload" crossorigin href="./static/js/{name}">' for name in preloads]
    if plotly is not None:
        # a classic script runs as it is parsed, before any module: its setter hears Plotly's bundle set window.Plotly
        lines.insert(0, f"<script>\n{PLOTLY_ONCE.read_text(encoding='utf-8')}</script>")
        closure = [name for name in import_closure(js_dir, plotly) if name not in listed and name not in preloads]
        script = (
            _EARLY_PLOTLY.replace("CHARTLESS", json.dumps(sorted(set(chartless))))
            .replace("MAP_FIRST", json.dumps(sorted(set(map_first))))
            .replace("CLOSURE", json.dumps(closure))
            .replace("CHUNK", plotly)
        )
        lines += script.strip().splitlines()
    return index_html.replace("</head>", "  " + "\n    ".join(lines) + "\n  </head>", 1)


def _media_type(name: str) -> str:
    media_type = mimetypes.guess_type(name)[0] or "text/plain"
    return f"{media_type}; charset=utf-8" if media_type.startswith("text/") else media_type


def _cache_control(relative: str) -> str:
    return "no-cache" if _NO_CACHE.search(relative) else f"public, immutable, max-age={IMMUTABLE_MAX_AGE_S}"


def encode(relative: str, data: bytes, compress: bool) -> Encoded:
    """``data`` (the file ``relative`` to the static folder) as sent: gzipped (deterministic: no time stamp) or not."""
    body = gzip.compress(data, GZIP_LEVEL, mtime=0) if compress else data
    etag = f'"{hashlib.sha256(body).hexdigest()[:32]}"'
    return Encoded(body, etag, _media_type(relative), _cache_control(relative), compress)


class StaticAssets:
    """Streamlit's static folder as ``serve.py`` sends it; thread-safe, each file compressed at most once."""

    def __init__(self, static_dir: Path, elements: Iterable[str] = FIRST_SCREEN):
        self.static_dir = static_dir
        self._files = {
            path.relative_to(static_dir).as_posix(): path
            for path in static_dir.rglob("*")
            if path.is_file() and path.suffix in COMPRESSIBLE and path.stat().st_size >= MIN_BYTES
        }
        index = static_dir / INDEX
        self.original_index = index.read_bytes() if index.is_file() else b""
        page = with_early_modules(self.original_index.decode("utf-8"), static_dir / "static" / "js", elements)
        self.index = {compress: encode(INDEX, page.encode("utf-8"), compress) for compress in (False, True)}
        self._gzipped: dict[str, Encoded] = {}
        self._lock = threading.Lock()

    def compressible(self, relative: str) -> bool:
        """Whether ``relative`` (a URL path under the static mount, no leading slash) names a file served gzipped."""
        return relative in self._files and relative != INDEX

    def ready(self, relative: str) -> Encoded | None:
        """The file's gzip encoding if it has been compressed already (no waiting, no work)."""
        return self._gzipped.get(relative)

    def gzipped(self, relative: str) -> Encoded:
        """The file's gzip encoding, compressed now if :meth:`prepare` has not done it yet."""
        if (done := self._gzipped.get(relative)) is not None:
            return done
        encoded = encode(relative, self._files[relative].read_bytes(), compress=True)
        with self._lock:
            return self._gzipped.setdefault(relative, encoded)

    def prepare(self, names: Iterable[str] | None = None, workers: int = 2) -> int:
        """Compress every compressible file (or ``names``) now, ``workers`` at a time (zlib frees the GIL); bytes."""
        todo = [name for name in (self._files if names is None else names) if self.compressible(name)]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return sum(len(encoded.body) for encoded in pool.map(self.gzipped, todo))

    def page(self, gzipped: bool) -> Encoded:
        """Streamlit's page asking for the first screen's chunks early (:func:`with_early_modules`), gzipped or not."""
        return self.index[gzipped]


def streamlit_static_dir() -> Path:
    """The folder Streamlit serves its own page and scripts from."""
    from streamlit import file_util

    return Path(file_util.get_static_dir())

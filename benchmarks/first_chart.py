"""A new visitor's first map on a freshly started server, beside two plain Streamlit pages measured the same way:
``python -m benchmarks.first_chart [--runs 3] [--json]``.

Each visit starts a server anew and opens one page in a new Chromium context:

- ``text``: a text-only Streamlit page (benchmarks/first_paint/text_page.py: a title and a paragraph), the least
  a Streamlit page can draw; ``streamlit run`` with the flags attnviz's server gets;
- ``plotly``: a Streamlit page with one 30 x 30 Plotly heatmap (benchmarks/first_paint/plotly_page.py);
- each tree's attnviz (``streamlit run serve.py``, what ``make run`` and the container image do: it warms up before
  it answers), on the Heads page (the first page with a map; the default page, the Overview, draws none) at the
  default model.

It times, from the moment the browser asks for the page (``performance.timeOrigin``), on the first animation frame
after each thing is on the page (so it is painted then):

- ``dom``: the page's DOM is ready (``DOMContentLoaded`` done);
- ``first_paint``: the page's content: the text page's paragraph; a page's first map (the Plotly page's chart,
  attnviz's layer x head grid, drawn by its own canvas: attnviz.app.grid_canvas; an older tree's Plotly grid);
- ``first_interactive``: the first map that answers hover and click (the canvas does from its first draw, a
  Plotly chart once drawn);
- ``first_plotly``: the first Plotly chart drawn (on attnviz's Heads page since issue 39, the large view below the
  grid);
- ``map_message``: the websocket message that carries the first map arrives (the server's part is done);
- ``chunk_asked`` / ``chunk_loaded`` / ``chunk_evaluated``: the browser asks for Streamlit's 4.7 MB Plotly chunk /
  has all of it / has run it (Plotly's bundle, inside it, has set ``window.Plotly``).

Beside the times: the bytes on the wire (CDP ``Network.loadingFinished``'s ``encodedDataLength``, every HTTP
response up to the end of the visit, headers included), of which the Plotly chunk's, and the websocket's payload;
and the ratios of each page's first paint to the text page's, visit by visit (the same run, the same machine).

Two networks (``--network``): ``loopback``, and ``hosted``, a visitor through Chromium's network emulation
(``Network.emulateNetworkConditions``: 20 Mbit/s down and up, 40 ms latency). Several trees side by side
(``--tree NAME=PATH``, e.g. ``--tree before=/work/before --tree after=.``), each served by its own ``serve.py``
with its own code on ``PYTHONPATH``. Visits interleave pages, trees and networks, so that each sees the same
machine. Medians over ``--runs``. Target (issue 39): attnviz's first map within 1.5 x the text page's first paint.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tools.browser import streamlit_server

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 1.5  # attnviz's first map / the text page's first paint
HOSTED = {"offline": False, "latency": 40, "downloadThroughput": 20e6 / 8, "uploadThroughput": 20e6 / 8}
NETWORKS = {"loopback": None, "hosted": HOSTED}
REFERENCES = {"text": "first_paint/text_page.py", "plotly": "first_paint/plotly_page.py"}
ATTNVIZ_PAGE = "heads"
MARKS = (
    "dom",
    "first_paint",
    "first_interactive",
    "first_plotly",
    "map_message",
    "chunk_asked",
    "chunk_loaded",
    "chunk_evaluated",
)
LABELS = {
    "dom": "DOM ready",
    "first_paint": "first paint (text / map)",
    "first_interactive": "first interactive map",
    "first_plotly": "first Plotly chart drawn",
    "map_message": "first map's message in",
    "chunk_asked": "Plotly chunk asked",
    "chunk_loaded": "Plotly chunk loaded",
    "chunk_evaluated": "Plotly chunk evaluated",
}
BYTES = {
    "http_bytes": "bytes on the wire (HTTP)",
    "chunk_bytes": "of which the Plotly chunk",
    "ws_bytes": "websocket payload",
}
TEXT_MARKER = "attnviz-first-paint"

# in the page before any of its scripts: the animation frame after the text page's paragraph, a Plotly chart's SVG
# or attnviz's canvas map (its script sets window.__attnvizFirstMap when it has drawn) is on the page, and when the
# Plotly chunk's evaluation ends (its bundle's last statement is `window.Plotly = Plotly`: a setter here notes the
# time, and keeps the value)
OBSERVE = """
window.__firstPaint = {};
const frame = name => {
  const marks = window.__firstPaint;
  if (marks[name] !== undefined || marks[name + '_pending']) return;
  marks[name + '_pending'] = true;
  requestAnimationFrame(() => { marks[name] = performance.now(); });
};
new MutationObserver(() => {
  if (document.querySelector('.js-plotly-plot .main-svg')) frame('plotly');
  const texts = document.querySelectorAll('[data-testid="stMarkdownContainer"]');
  if ([...texts].some(text => text.textContent.includes('TEXT_MARKER'))) frame('text');
}).observe(document, {subtree: true, childList: true});
let canvasMap;
Object.defineProperty(window, '__attnvizFirstMap', {configurable: true, get: () => canvasMap, set: value => {
  canvasMap = value;
  frame('canvas');
}});
let plotly;
Object.defineProperty(window, 'Plotly', {configurable: true, get: () => plotly, set: value => {
  plotly = value;
  window.__firstPaint.evaluated ??= performance.now();
}});
""".replace("TEXT_MARKER", TEXT_MARKER)
CHUNK = "/static/js/PlotlyChart."


@contextmanager
def serve(site: tuple[str, Path], port: int, timeout: float = 300.0) -> Iterator[tuple[str, float]]:
    """``streamlit run`` of a site (script, tree: the tree's own code first on ``PYTHONPATH``); yields (URL,
    seconds to start)."""
    script, tree = site
    started = time.monotonic()
    with streamlit_server(timeout=timeout, script=script, root=tree, port=port) as url:
        yield url, time.monotonic() - started


def _carries_a_map(frame: dict) -> bool:
    payload = frame["response"]["payloadData"]
    data = base64.b64decode(payload) if frame["response"]["opcode"] == 2 else payload.encode()
    # a Plotly figure's JSON, or the canvas's picture (attnviz.figures.grid_picture), in the message that adds it
    return b'"layout"' in data or b'"png"' in data


def visit(browser, url: str, path: str, network: dict | None, end: str = "plotly") -> dict:
    """One new visitor: the marks (ms after the browser asks) and the bytes, until the ``end`` mark ("text": the
    text page's paragraph, "plotly": the first Plotly chart; attnviz's large view comes after its grid, so both
    are timed)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_init_script(OBSERVE)
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    requests: dict[str, dict] = {}
    frames: list[tuple[float, int, bool]] = []
    cdp.on("Network.requestWillBeSent", lambda e: requests.setdefault(e["requestId"], {"url": e["request"]["url"]}))
    cdp.on("Network.loadingFinished", lambda e: requests.get(e["requestId"], {}).update(bytes=e["encodedDataLength"]))
    cdp.on(
        "Network.webSocketFrameReceived",
        lambda e: frames.append((e["timestamp"], len(e["response"]["payloadData"]), _carries_a_map(e))),
    )
    cdp.on("Network.responseReceived", lambda e: requests.get(e["requestId"], {}).setdefault("t", e["timestamp"]))
    cdp.send("Network.enable")
    if network is not None:
        cdp.send("Network.emulateNetworkConditions", network)
    page.goto(f"{url}/{path}", wait_until="commit")  # the first paint is the end; the load event may come later
    page.wait_for_function(f"() => window.__firstPaint.{end} !== undefined", timeout=180_000, polling=50)
    found = page.evaluate(
        """chunk => {
          const nav = performance.getEntriesByType('navigation')[0];
          const res = performance.getEntriesByType('resource').filter(r => r.name.includes(chunk));
          const m = window.__firstPaint;
          const maps = [m.canvas, m.plotly].filter(t => t !== undefined);
          return {
            dom: nav.domContentLoadedEventEnd,
            first_paint: m.text ?? (maps.length ? Math.min(...maps) : null),
            first_interactive: maps.length ? Math.min(...maps) : null,
            first_plotly: m.plotly ?? null,
            chunk_asked: res.length ? res[0].startTime : null,
            chunk_loaded: res.length ? res[0].responseEnd : null,
            chunk_requests: res.length,
            chunk_evaluated: m.evaluated ?? null,
          };
        }""",
        CHUNK,
    )
    # CDP's timestamps are the browser's monotonic clock: the document's response start in both clocks ties them
    document = next(r for r in requests.values() if r["url"].rstrip("/") == f"{url}/{path}".rstrip("/"))
    response_start = page.evaluate("performance.getEntriesByType('navigation')[0].responseStart")
    offset_ms = document["t"] * 1000 - response_start
    map_frames = [t for t, _, carries in frames if carries]
    context.close()
    return {
        **{mark: found[mark] for mark in MARKS if mark in found},
        "map_message": map_frames[0] * 1000 - offset_ms if map_frames else None,
        "chunk_requests": found["chunk_requests"],
        "http_bytes": sum(r.get("bytes", 0) for r in requests.values()),
        "chunk_bytes": sum(r.get("bytes", 0) for r in requests.values() if CHUNK in r["url"]),
        "ws_bytes": sum(n for _, n, _ in frames),
    }


def free_port() -> int:
    """A port from the kernel's ephemeral range: not one of the block that tests' servers draw from in turn
    (tools.browser.free_port), which a test run beside this one could take while a server here warms up."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sites(trees: dict[str, Path]) -> dict[str, tuple[str, Path, str]]:
    """What each visit serves: {name: (script, tree, page path)}: the two references, then each tree's attnviz."""
    here = Path(__file__).resolve().parent
    refs = {name: (str(here / script), ROOT, "") for name, script in REFERENCES.items()}
    return {**refs, **{name: ("serve.py", tree, ATTNVIZ_PAGE) for name, tree in trees.items()}}


def measure(trees: dict[str, Path], networks: list[str], runs: int) -> dict:
    """Every visit, by network and site: ``{network: {site: [visit, ...]}}``, and each server's start time."""
    from tools.browser import chromium_browser

    served = sites(trees)
    visits: dict[str, dict[str, list[dict]]] = {net: {name: [] for name in served} for net in networks}
    starts: dict[str, list[float]] = {name: [] for name in served}
    with chromium_browser() as browser:
        for _ in range(runs):
            for net in networks:
                for name, (script, tree, path) in served.items():  # interleaved: every site sees the same machine
                    with serve((script, tree), free_port()) as (url, start_s):
                        starts[name].append(start_s)
                        found = visit(browser, url, path, NETWORKS[net], "text" if name == "text" else "plotly")
                        visits[net][name].append({**found, "load": os.getloadavg()[0]})
    return {"visits": visits, "server_start_s": starts}


def _median(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summary(result: dict) -> dict:
    """Medians per network and site; each page's first paint over the text page's, visit by visit (the median of
    the ratios) and of the medians; whether attnviz's first map met the target."""
    out = {}
    for net, by_site in result["visits"].items():
        out[net] = {}
        texts = [v["first_paint"] for v in by_site["text"]]
        for name, visits in by_site.items():
            medians = {key: _median([v[key] for v in visits]) for key in (*MARKS, *BYTES)}
            ratios = [v["first_paint"] / t for v, t in zip(visits, texts, strict=False) if v["first_paint"] and t]
            entry = {
                "runs": len(visits),
                "median": medians,
                "first_paint_ms": [v["first_paint"] for v in visits],
                "ratio_to_text": _median(ratios),
                "ratios_to_text": ratios,
            }
            if name not in REFERENCES:
                entry["met"] = entry["ratio_to_text"] is not None and entry["ratio_to_text"] <= TARGET_RATIO
            out[net][name] = entry
    return out


def _cell(value: float | None, key: str) -> str:
    if value is None:
        return "-"
    return f"{value / 1e6:.2f} MB" if key in BYTES else f"{value / 1000:.2f} s"


def table(result: dict) -> str:
    """The side-by-side table: one block per network, one column per site, medians and ratios."""
    lines = []
    for net, by_site in summary(result).items():
        names = list(by_site)
        runs = {by_site[n]["runs"] for n in names}
        where = "loopback" if net == "loopback" else "hosted: Chromium's emulation, 20 Mbit/s, 40 ms"
        lines.append(f"{where}; medians of {'/'.join(map(str, sorted(runs)))} visits, after the browser asks")
        lines.append(f"  {'':28}" + "".join(f"{n:>14}" for n in names))
        for key, label in {**LABELS, **BYTES}.items():
            lines.append(f"  {label:28}" + "".join(f"{_cell(by_site[n]['median'][key], key):>14}" for n in names))
        ratio = "".join(f"{by_site[n]['ratio_to_text'] or 0:>13.2f}x" for n in names)
        lines.append(f"  {'first paint / text page':28}" + ratio)
        for n in names:
            each = ", ".join(f"{ms / 1000:.2f}" for ms in by_site[n]["first_paint_ms"] if ms)
            verdict = "" if n in REFERENCES else f"; target <= {TARGET_RATIO} x the text page: "
            verdict += "" if n in REFERENCES else ("met" if by_site[n]["met"] else "NOT met")
            lines.append(f"  {n}: first paint {each} s{verdict}")
    starts = ", ".join(f"{n} {statistics.median(s):.1f} s" for n, s in result["server_start_s"].items() if s)
    loads = [v["load"] for by_site in result["visits"].values() for vs in by_site.values() for v in vs]
    lines.append(f"server start to health, median: {starts}; 1-min load average during the visits: "
                 f"{min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs")  # fmt: skip
    return "\n".join(lines)


def _tree(text: str) -> tuple[str, Path]:
    name, _, path = text.partition("=")
    if not path:
        name, path = Path(text).resolve().name, text
    tree = Path(path).resolve()
    if not (tree / "serve.py").is_file():
        raise argparse.ArgumentTypeError(f"{tree} has no serve.py")
    if name in REFERENCES:
        raise argparse.ArgumentTypeError(f"{name!r} names a reference page: call the tree something else")
    return name, tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tree", type=_tree, action="append", help="NAME=PATH of a checkout to serve (repeatable)")
    parser.add_argument("--network", choices=list(NETWORKS), action="append", help="default: both")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    trees = dict(args.tree or [("attnviz", ROOT)])
    result = measure(trees, args.network or list(NETWORKS), args.runs)
    if args.json:
        print(json.dumps({**result, "summary": summary(result), "target_ratio": TARGET_RATIO}, indent=2))
        return
    print(table(result))


if __name__ == "__main__":
    main()

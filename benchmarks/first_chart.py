"""A new visitor's first chart on a freshly started server: ``python -m benchmarks.first_chart [--runs 3] [--json]``.

Each visit starts ``streamlit run serve.py`` anew (what ``make run`` and the container image do), waits until
the server answers its health check, opens the Heads page (the first page with a chart: the default page, the
Overview, draws none) at the default model in a new Chromium context, and times, from the moment the browser
asks for the page (``performance.timeOrigin``), where the time goes:

- ``dom``: the page's DOM is ready (``DOMContentLoaded`` done);
- ``chart_message``: the websocket message that carries the first chart arrives (the server's part is done);
- ``chunk_asked`` / ``chunk_loaded``: the browser asks for Streamlit's 4.7 MB Plotly chunk / has all of it;
- ``chunk_evaluated``: the chunk's module has run (Plotly's bundle, inside it, has set ``window.Plotly``);
- ``first_chart``: the first Plotly chart is drawn (its ``.main-svg`` is in the page).

Beside the times: the bytes on the wire (CDP ``Network.loadingFinished``'s ``encodedDataLength``, every HTTP
response up to the first chart, headers included), of which the Plotly chunk's, and the websocket's payload.

Two networks (``--network``): ``loopback``, and ``hosted``, a visitor through Chromium's network emulation
(``Network.emulateNetworkConditions``: 20 Mbit/s down and up, 40 ms latency). Several trees side by side
(``--tree NAME=PATH``, e.g. ``--tree before=/work/before --tree after=.``), each served by its own ``serve.py``
with its own code on ``PYTHONPATH``; visits interleave trees and networks, so that every tree sees the same
machine. Medians over ``--runs``. Target: the first chart <= 3 s after the browser asks, on both networks.
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
TARGET_MS = 3000.0
PAGE = "heads"
HOSTED = {"offline": False, "latency": 40, "downloadThroughput": 20e6 / 8, "uploadThroughput": 20e6 / 8}
NETWORKS = {"loopback": None, "hosted": HOSTED}
MARKS = ("dom", "chart_message", "chunk_asked", "chunk_loaded", "chunk_evaluated", "first_chart")
LABELS = {
    "dom": "DOM ready",
    "chart_message": "first chart's message in",
    "chunk_asked": "Plotly chunk asked",
    "chunk_loaded": "Plotly chunk loaded",
    "chunk_evaluated": "Plotly chunk evaluated",
    "first_chart": "first chart drawn",
}
BYTES = {
    "http_bytes": "bytes on the wire (HTTP)",
    "chunk_bytes": "of which the Plotly chunk",
    "ws_bytes": "websocket payload",
}

# in the page before any of its scripts: when the first chart's SVG appears, and when the Plotly chunk's evaluation
# ends (its bundle's last statement is `window.Plotly = Plotly`: a setter here notes the time, and keeps the value)
OBSERVE = """
window.__firstChart = {};
new MutationObserver(() => {
  const marks = window.__firstChart;
  if (!marks.svg && document.querySelector('.js-plotly-plot .main-svg')) marks.svg = performance.now();
}).observe(document, {subtree: true, childList: true});
let plotly;
Object.defineProperty(window, 'Plotly', {configurable: true, get: () => plotly, set: value => {
  plotly = value;
  window.__firstChart.evaluated ??= performance.now();
}});
"""
CHUNK = "/static/js/PlotlyChart."


@contextmanager
def serve(tree: Path, port: int, timeout: float = 300.0) -> Iterator[tuple[str, float]]:
    """``streamlit run serve.py`` of ``tree`` (its own code first on ``PYTHONPATH``); yields (URL, seconds to start)."""
    started = time.monotonic()
    with streamlit_server(timeout=timeout, script="serve.py", root=tree, port=port) as url:
        yield url, time.monotonic() - started


def _carries_a_figure(frame: dict) -> bool:
    payload = frame["response"]["payloadData"]
    data = base64.b64decode(payload) if frame["response"]["opcode"] == 2 else payload.encode()
    return b'"layout"' in data  # a Plotly figure's JSON, inside the protobuf message that adds the chart


def visit(browser, url: str, network: dict | None) -> dict:
    """One new visitor's first chart: the marks (ms after the browser asks) and the bytes."""
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
        lambda e: frames.append((e["timestamp"], len(e["response"]["payloadData"]), _carries_a_figure(e))),
    )
    cdp.on("Network.responseReceived", lambda e: requests.get(e["requestId"], {}).setdefault("t", e["timestamp"]))
    cdp.send("Network.enable")
    if network is not None:
        cdp.send("Network.emulateNetworkConditions", network)
    page.goto(f"{url}/{PAGE}", wait_until="commit")  # the first chart is the end; the load event may come later
    page.wait_for_function("() => window.__firstChart.svg !== undefined", timeout=180_000, polling=50)
    found = page.evaluate(
        """chunk => {
          const nav = performance.getEntriesByType('navigation')[0];
          const res = performance.getEntriesByType('resource').filter(r => r.name.includes(chunk));
          return {
            dom: nav.domContentLoadedEventEnd,
            chunk_asked: res.length ? res[0].startTime : null,
            chunk_loaded: res.length ? res[0].responseEnd : null,
            chunk_requests: res.length,
            chunk_evaluated: window.__firstChart.evaluated ?? null,
            first_chart: window.__firstChart.svg,
            origin: performance.timeOrigin,
          };
        }""",
        CHUNK,
    )
    # CDP's timestamps are the browser's monotonic clock: the document's response start in both clocks ties them
    document = next(r for r in requests.values() if r["url"].rstrip("/").endswith(f"/{PAGE}"))
    response_start = page.evaluate("performance.getEntriesByType('navigation')[0].responseStart")
    offset_ms = document["t"] * 1000 - response_start
    figure_frames = [t for t, _, figure in frames if figure]
    context.close()
    return {
        **{mark: found[mark] for mark in MARKS if mark in found},
        "chart_message": figure_frames[0] * 1000 - offset_ms if figure_frames else None,
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


def measure(trees: dict[str, Path], networks: list[str], runs: int) -> dict:
    """Every visit, by network and tree: ``{network: {tree: [visit, ...]}}``, and each server's start time."""
    from tools.browser import chromium_browser

    visits: dict[str, dict[str, list[dict]]] = {net: {name: [] for name in trees} for net in networks}
    starts: dict[str, list[float]] = {name: [] for name in trees}
    with chromium_browser() as browser:
        for _ in range(runs):
            for net in networks:
                for name, tree in trees.items():  # interleaved: every tree sees the same machine
                    with serve(tree, free_port()) as (url, start_s):
                        starts[name].append(start_s)
                        visits[net][name].append({**visit(browser, url, NETWORKS[net]), "load": os.getloadavg()[0]})
    return {"visits": visits, "server_start_s": starts}


def _median(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summary(result: dict) -> dict:
    """Medians per network and tree, and whether the first chart met the target."""
    out = {}
    for net, by_tree in result["visits"].items():
        out[net] = {}
        for name, visits in by_tree.items():
            medians = {key: _median([v[key] for v in visits]) for key in (*MARKS, *BYTES)}
            out[net][name] = {
                "runs": len(visits),
                "median": medians,
                "first_chart_ms": [v["first_chart"] for v in visits],
                "met": medians["first_chart"] is not None and medians["first_chart"] <= TARGET_MS,
            }
    return out


def _cell(value: float | None, key: str) -> str:
    if value is None:
        return "-"
    return f"{value / 1e6:.2f} MB" if key in BYTES else f"{value / 1000:.2f} s"


def table(result: dict) -> str:
    """The side-by-side table: one block per network, one column per tree, medians."""
    lines = []
    for net, by_tree in summary(result).items():
        names = list(by_tree)
        runs = {by_tree[n]["runs"] for n in names}
        where = "loopback" if net == "loopback" else "hosted: Chromium's emulation, 20 Mbit/s, 40 ms"
        lines.append(f"{where}; medians of {'/'.join(map(str, sorted(runs)))} visits, after the browser asks")
        lines.append(f"  {'':28}" + "".join(f"{n:>14}" for n in names))
        for key, label in {**LABELS, **BYTES}.items():
            lines.append(f"  {label:28}" + "".join(f"{_cell(by_tree[n]['median'][key], key):>14}" for n in names))
        for n in names:
            each = ", ".join(f"{ms / 1000:.2f}" for ms in by_tree[n]["first_chart_ms"])
            verdict = "met" if by_tree[n]["met"] else "NOT met"
            lines.append(f"  {n}: first chart {each} s; target <= {TARGET_MS / 1000:.0f} s: {verdict}")
    starts = ", ".join(f"{n} {statistics.median(s):.1f} s" for n, s in result["server_start_s"].items() if s)
    loads = [v["load"] for by_tree in result["visits"].values() for vs in by_tree.values() for v in vs]
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
    return name, tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tree", type=_tree, action="append", help="NAME=PATH of a checkout to serve (repeatable)")
    parser.add_argument("--network", choices=list(NETWORKS), action="append", help="default: both")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    trees = dict(args.tree or [("this", ROOT)])
    result = measure(trees, args.network or list(NETWORKS), args.runs)
    if args.json:
        print(json.dumps({**result, "summary": summary(result), "target_ms": TARGET_MS}, indent=2))
        return
    print(table(result))


if __name__ == "__main__":
    main()

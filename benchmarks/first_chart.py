"""A new visitor on a freshly started server: ``python -m benchmarks.first_chart [--runs 3] [--json]``.

Each run starts ``streamlit run serve.py`` anew (what ``make run`` and the
container image do: the server imports the first page's modules and loads the
default model before it accepts a connection), waits until the server answers
its health check, then opens the Heads page in a new Chromium context and
times, from ``page.goto`` until the first Plotly chart of the page has been
drawn (the browser asks -> the chart is there). Side by side in the same run,
interleaved: the reference, a fresh ``streamlit run app.py`` (no warm-up).
Also reported: the same from the moment the server process started, a second
visitor on the same server, and what the first page's imports take in a fresh
Python. Target: first chart <= 4 s after the browser asks.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

TARGET_S = 4.0
SCRIPTS = ("serve.py", "app.py")


def _first_chart(browser, url: str) -> float:
    from tools.browser import wait_for_charts

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    start = time.monotonic()
    page.goto(f"{url}/heads")
    wait_for_charts(page, 1, timeout_ms=180_000)
    seconds = time.monotonic() - start
    context.close()
    return seconds


def import_seconds() -> float:
    """What importing the app's modules takes in a fresh Python (the part a cold server pays once)."""
    code = (
        "import importlib, time; from attnviz.app.warm import MODULES; t = time.perf_counter(); "
        "[importlib.import_module(m) for m in MODULES]; print(time.perf_counter() - t)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def measure(runs: int) -> list[dict]:
    """Per way of starting the server: ``serve.py`` (warmed at start) and, as the reference, ``app.py``."""
    from tools.browser import chromium_browser, streamlit_server

    times = {script: {"cold": [], "from_start": [], "warm": []} for script in SCRIPTS}
    with chromium_browser() as browser:
        for _ in range(runs):
            for script in SCRIPTS:  # interleaved, so that both see the same machine
                started = time.monotonic()
                with streamlit_server(timeout=300.0, script=script) as url:
                    ready = time.monotonic()
                    cold = _first_chart(browser, url)
                    times[script]["cold"].append(cold)
                    times[script]["from_start"].append(ready - started + cold)
                    times[script]["warm"].append(_first_chart(browser, url))  # a second visitor, same server
    rows = []
    for script, t in times.items():
        median = statistics.median(t["cold"])
        rows.append(
            {
                "case": f"Heads page, first chart, new visitor, fresh `streamlit run {script}` (Chromium)",
                "runs": runs,
                "cold_s": t["cold"],
                "cold_median_s": median,
                "from_server_start_s": t["from_start"],
                "second_visitor_s": t["warm"],
                "target_s": TARGET_S,
                "met": median <= TARGET_S,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = measure(args.runs)
    imports = import_seconds()
    if args.json:
        print(json.dumps({"rows": rows, "imports_fresh_python_s": imports}, indent=2))
        return
    for row in rows:
        print(row["case"])
        print(f"  browser asks -> first chart: {', '.join(f'{s:.2f}' for s in row['cold_s'])} s")
        print(f"  median {row['cold_median_s']:.2f} s; target <= {TARGET_S} s: {'met' if row['met'] else 'NOT met'}")
        print(f"  server process start -> first chart: {', '.join(f'{s:.2f}' for s in row['from_server_start_s'])} s")
        print(f"  a second visitor on the same server: {', '.join(f'{s:.2f}' for s in row['second_visitor_s'])} s")
    print(f"the first page's imports in a fresh Python: {imports:.2f} s")


if __name__ == "__main__":
    main()

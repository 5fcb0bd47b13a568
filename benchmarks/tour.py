"""The tour, step to step, on a freshly started server: ``python -m benchmarks.tour [--runs 2] [--lang en] [--json]``.

A fresh ``serve.py`` (what ``make run`` and the container image serve: it warms up before it answers, and starts
the tour's warm-up in the background, :func:`attnviz.app.tour.cache.warm_tour_in_background`). Visitors, each a
new Chromium context at 1400 x 1000, open the tour on its first step and click Next through every step. Each step
is timed from the click on Next (``performance.now()`` in the page, just before the click) to the first animation
frame on which the next step is in the address, the server's run for it has finished and its demonstration (a
chart, the pitfalls' table, the code step's code) is on the page: the step drawn, as the reader sees it.

- ``first``: the first visitor, straight after the server answers, while the tour's warm-up may still run (a step
  not warmed yet is computed, or waited for, on the click);
- ``warm``: ``--runs`` later visitors, once the server's log says the tour has warmed up.

Per pass: every step's milliseconds, their median and maximum.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from attnviz.labs.tour.steps import STEPS
from tools.browser import chromium_browser, free_port, streamlit_server, wait_until_idle

ROOT = Path(__file__).resolve().parents[1]
DRAWN = ", ".join(
    f"[data-testid='stMain'] {part}"
    for part in (".js-plotly-plot .main-svg", "[data-testid='stTable']", "[data-testid='stCode']")
)
WARMED = "the tour warmed up"  # the server's log line when its background tour warm-up ends
STEP_TIMEOUT_MS = 300_000

# the animation frame after the step `key` is drawn: in the address, the run done, a chart (or the table) there
TIMED_CLICK = """([key, drawn]) => new Promise(resolve => {
  const app = document.querySelector('[data-testid="stApp"]');
  const start = performance.now();
  document.querySelector('.st-key-tour_next button').click();
  const poll = () => {
    const done = new URL(location.href).searchParams.get('step') === key
      && app.getAttribute('data-test-script-state') === 'notRunning'
      && document.querySelector(drawn);
    if (done) requestAnimationFrame(() => resolve(performance.now() - start));
    else setTimeout(poll, 10);
  };
  setTimeout(poll, 50);
})"""


def walk(browser, url: str, lang: str) -> dict[str, float]:
    """One new visitor through the whole tour: ms from each click on Next to the next step drawn."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(STEP_TIMEOUT_MS)
    try:
        page.goto(f"{url}/tour?step={STEPS[0].key}&lang={lang}")
        wait_until_idle(page, STEP_TIMEOUT_MS)
        page.locator(DRAWN).first.wait_for(state="visible", timeout=STEP_TIMEOUT_MS)
        times = {}
        for step in STEPS[1:]:
            times[step.key] = round(page.evaluate(TIMED_CLICK, [step.key, DRAWN]), 1)
            wait_until_idle(page, STEP_TIMEOUT_MS)
        return times
    finally:
        context.close()


def summary(times: dict[str, float]) -> dict[str, float]:
    values = list(times.values())
    return {"median_ms": statistics.median(values), "max_ms": max(values), "slowest": max(times, key=times.get)}


def measure(runs: int, lang: str) -> dict:
    port = free_port()
    log = ROOT / ".pytest_cache" / f"streamlit-{port}.log"  # where tools.browser.streamlit_server logs the server
    with streamlit_server(timeout=300.0, script="serve.py", port=port) as url, chromium_browser() as browser:
        first = walk(browser, url, lang)
        deadline = time.monotonic() + 600
        while WARMED not in log.read_text(errors="replace"):
            if time.monotonic() > deadline:
                raise RuntimeError("the server's tour warm-up did not end in 10 minutes")
            time.sleep(1)
        warm = [walk(browser, url, lang) for _ in range(runs)]
    return {
        "lang": lang,
        "first": {"steps_ms": first, **summary(first)},
        "warm": [{"steps_ms": times, **summary(times)} for times in warm],
    }


def table(result: dict) -> str:
    passes = [("first", result["first"])] + [(f"warm {i + 1}", w) for i, w in enumerate(result["warm"])]
    lines = [f"{'step':<18}" + "".join(f"{name:>10}" for name, _ in passes)]
    for step in STEPS[1:]:
        lines.append(f"{step.key:<18}" + "".join(f"{p['steps_ms'][step.key]:>10.0f}" for _, p in passes))
    lines.append(f"{'median':<18}" + "".join(f"{p['median_ms']:>10.0f}" for _, p in passes))
    lines.append(f"{'max':<18}" + "".join(f"{p['max_ms']:>10.0f}" for _, p in passes))
    return "\n".join(lines) + "\n(ms from a click on Next to the next step drawn)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2, help="visitors after the warm-up (default 2)")
    parser.add_argument("--lang", choices=["en", "zh"], default="en")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.runs, args.lang)
    print(json.dumps(result, indent=2) if args.json else table(result))


if __name__ == "__main__":
    main()

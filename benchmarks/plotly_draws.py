"""How many times Plotly draws each chart on a page's first render: ``python -m benchmarks.plotly_draws [--json]``.

Issue 39 asks that no chart be laid out or drawn twice when a page first renders. This counts, in a real Chromium
visitor, per chart (per ``.js-plotly-plot`` div), from the moment the browser asks for the page until the page has
been quiet for :data:`SETTLE_MS`:

- ``draws``: Plotly's full draws (its internal ``_doPlot``, which a first ``react`` runs, and runs again for
  ``automargin`` or a change of size); each begins with a ``plotly_beforeplot`` event, counted here;
- ``afterplot``: ``plotly_afterplot`` events, one per finished update, full or partial;
- ``calls``: what Streamlit's frontend asked of Plotly's API for that div (``react``, ``newPlot``, ``relayout``,
  ``restyle``, ``update``, ``redraw``, ``Plots.resize``), in order, with the layout size each asked for;
- ``draws_by_call``: the draws between one API call and the next (Streamlit 1.67 makes two ``react`` calls per new
  chart: ``[2, 1]`` is a first call that draws and redraws for automargin, then a second that draws it all again);
- the main thread's milliseconds in each call, the time of the first and last draw, and the size (``_fullLayout``
  width x height) each draw ended at.

How: an init script, in the page before any of its scripts, puts a setter on ``window.Plotly`` (the Plotly chunk's
bundle ends with ``window.Plotly = Plotly``) that wraps those API functions as the bundle hands them over, and an
accessor on ``HTMLElement.prototype`` for ``_ev`` and ``emit``, the two properties Plotly's ``Events.init`` gives a
graph div: when Plotly sets them, the accessor makes them the div's own (so Plotly's ``Events.purge`` still deletes
them) and notes each event. Nothing else in the page changes.

Pages measured (``--page``, repeatable; default all):

- ``stretch``: a minimal Streamlit page, one ``st.plotly_chart(fig)`` of a 30 x 30 heatmap (width "stretch");
- ``content``: the same figure with ``layout.width=600``, ``width="content"`` (attnviz's ``plotly()`` does that for
  a figure that sets its own width);
- ``heads``, ``masks``: attnviz's pages through ``serve.py`` (``make run``) at the default model (the Walkthrough
  shows tables, no chart, at the default text). ``serve.py``'s page carries ``attnviz/app/plotly_once.js`` itself
  (attnviz.app.static_assets), so there "as is" is with it (to measure without it, run this module from a
  checkout before it).

``--patch FILE`` adds a script (e.g. ``attnviz/app/plotly_once.js``) to every page before its own scripts, to
measure a fix from attnviz's side without changing the app; ``--compare FILE`` runs each page without and with it;
``--check FILE`` only checks that, with it, a rerun with new data, a click that selects, the modebar and a narrower
window still work (tests/integration/browser/test_browser_plotly_once.py asserts the same).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

from tools.browser import chromium_browser, streamlit_server, wait_until_idle

ROOT = Path(__file__).resolve().parents[1]
SETTLE_MS = 2500  # no draw for this long after the last chart appeared: the first render is over
VIEWPORT = {"width": 1400, "height": 1000}

COUNT = """
(() => {
  const log = (window.__plotlyDraws = { events: [], calls: [], next: 0 });
  const ids = new WeakMap();
  const idOf = gd => {
    if (!gd || typeof gd !== 'object') return String(gd);
    if (!ids.has(gd)) ids.set(gd, log.next++);
    return ids.get(gd);
  };
  const size = gd => gd && gd._fullLayout ? [gd._fullLayout.width, gd._fullLayout.height] : null;
  const NOTED = new Set(['plotly_beforeplot', 'plotly_afterplot', 'plotly_relayout', 'plotly_autosize',
                         'plotly_redraw', 'plotly_restyle', 'plotly_react']);
  const note = (gd, what) => log.events.push({ gd: idOf(gd), what, t: performance.now(), size: size(gd) });
  // Plotly's Events.init sets gd._ev (its emitter) and gd.emit; Events.purge deletes them. An accessor on the
  // prototype hears each setting and makes the value the div's own, so that the delete still works.
  Object.defineProperty(HTMLElement.prototype, '_ev', { configurable: true, get: () => undefined, set(ev) {
    Object.defineProperty(this, '_ev', { value: ev, writable: true, configurable: true, enumerable: true });
    const gd = this;
    ev.on('plotly_beforeplot', () => { note(gd, 'plotly_beforeplot'); });  // triggerHandler reads _ev's listeners
  } });
  Object.defineProperty(HTMLElement.prototype, 'emit', { configurable: true, get: () => undefined, set(emit) {
    const gd = this;
    const wrapped = function (event, data) {
      if (NOTED.has(event) && event !== 'plotly_beforeplot') note(gd, event);
      return emit.apply(this, arguments);
    };
    Object.defineProperty(this, 'emit', { value: wrapped, writable: true, configurable: true, enumerable: true });
  } });
  const wrap = (owner, name, label) => {
    const original = owner && owner[name];
    if (typeof original !== 'function' || original.__counted) return;
    const counted = function (gd, ...rest) {
      const layout = name === 'react' || name === 'newPlot' ? (rest[0] && rest[0].layout) || rest[1] : null;
      const asked = layout ? [layout.width ?? null, layout.height ?? null] : null;
      const entry = { gd: idOf(gd), what: label, t: performance.now(), asked, before: size(gd) };
      log.calls.push(entry);
      const result = original.call(this, gd, ...rest);
      entry.sync_ms = performance.now() - entry.t;
      Promise.resolve(result).then(() => { entry.done = performance.now(); entry.after = size(gd); }, () => {});
      return result;
    };
    counted.__counted = true;
    owner[name] = counted;
  };
  let plotly;
  Object.defineProperty(window, 'Plotly', { configurable: true, get: () => plotly, set: value => {
    plotly = value;
    log.evaluated = performance.now();
    for (const name of ['newPlot', 'react', 'relayout', 'restyle', 'update', 'redraw', 'purge']) wrap(value, name, name);
    wrap(value && value.Plots, 'resize', 'Plots.resize');
  } });
  new MutationObserver(() => {
    log.last_chart ??= undefined;
    const n = document.querySelectorAll('.js-plotly-plot .main-svg').length;
    if (n && log.first_svg === undefined) log.first_svg = performance.now();
  }).observe(document, { subtree: true, childList: true });
})();
"""

# per graph div that Plotly drew: its id (the order Plotly first saw it), the chart's key (Streamlit's st-key-*
# class on an ancestor) and its place on the page
COLLECT = """
() => {
  const log = window.__plotlyDraws;
  const divs = [...document.querySelectorAll('.js-plotly-plot')];
  const ids = new Map();
  for (const call of log.calls) ids.has(call.gd) || ids.set(call.gd, ids.size);
  return { events: log.events, calls: log.calls, evaluated: log.evaluated ?? null, first_svg: log.first_svg ?? null,
           charts: divs.length,
           keys: divs.map(div => {
             const owner = div.closest('[class*="st-key-"]');
             const key = owner ? [...owner.classList].find(c => c.startsWith('st-key-')).slice(7) : null;
             return { key, width: div.getBoundingClientRect().width, height: div.getBoundingClientRect().height };
           }) };
}
"""

STRETCH_PAGE = """
import numpy as np
import plotly.graph_objects as go
import streamlit as st

st.title("One chart")
z = np.random.default_rng(0).random((30, 30))
fig = go.Figure(go.Heatmap(z=z))
{layout}
st.plotly_chart(fig, key="chart", width="{width}")
"""
MINIMAL = {
    "stretch": STRETCH_PAGE.format(layout="", width="stretch"),
    "content": STRETCH_PAGE.format(layout="fig.update_layout(width=600, height=600)", width="content"),
}
ATTNVIZ = {"heads": ("heads", 1), "masks": ("masks", 1)}  # page -> (URL path, charts to wait for)


def visit(browser, url: str, path: str, charts: int, patch: str | None) -> dict:
    """One new visitor: open ``url/path``, wait for ``charts`` charts and quiet, return the log."""
    context = browser.new_context(viewport=VIEWPORT)
    context.add_init_script(COUNT)
    if patch is not None:
        context.add_init_script(patch)
    page = context.new_page()
    page.goto(f"{url}/{path}", wait_until="commit")
    page.wait_for_function(
        "n => document.querySelectorAll('.js-plotly-plot .main-svg').length >= n", arg=charts, timeout=240_000
    )
    wait_until_idle(page, 240_000)
    quiet_since = page.evaluate("performance.now()")
    while True:  # the first render is over once no draw has happened for SETTLE_MS
        page.wait_for_timeout(500)
        last = page.evaluate(
            "() => Math.max(0, ...window.__plotlyDraws.events.map(e => e.t), ...window.__plotlyDraws.calls.map(c => c.t))"
        )
        now = page.evaluate("performance.now()")
        if now - max(last, quiet_since) >= SETTLE_MS:
            break
    found = page.evaluate(COLLECT)
    context.close()
    return found


def per_chart(found: dict) -> list[dict]:
    """The log grouped by graph div: draws, afterplots, API calls, sizes."""
    out = {}
    for call in found["calls"]:
        out.setdefault(call["gd"], {"calls": [], "events": []})["calls"].append(call)
    for event in found["events"]:
        out.setdefault(event["gd"], {"calls": [], "events": []})["events"].append(event)
    rows = []
    for gd, log in sorted(out.items()):
        draws = [e for e in log["events"] if e["what"] == "plotly_beforeplot"]
        after = [e for e in log["events"] if e["what"] == "plotly_afterplot"]
        starts = [c["t"] for c in log["calls"]]
        by_call = [sum(1 for d in draws if d["t"] >= t and (i + 1 == len(starts) or d["t"] < starts[i + 1]))
                   for i, t in enumerate(starts)]  # fmt: skip
        rows.append(
            {
                "gd": gd,
                "draws": len(draws),
                "draws_by_call": by_call,
                "afterplot": len(after),
                "calls": [c["what"] for c in log["calls"]],
                "asked": [c.get("asked") for c in log["calls"]],
                "sizes": [e["size"] for e in after],
                "first_draw_ms": draws[0]["t"] if draws else None,
                "last_draw_end_ms": after[-1]["t"] if after else None,
                "react_sync_ms": [round(c.get("sync_ms", 0), 1) for c in log["calls"]],
            }
        )
    return rows


CHECK_PAGE = """
import numpy as np
import plotly.graph_objects as go
import streamlit as st

seed = st.number_input("seed", value=0, key="seed")
z = np.random.default_rng(int(seed)).random((10, 10))
fig = go.Figure([go.Heatmap(z=z), go.Scatter(x=np.arange(10), y=np.arange(10), mode="markers")])  # points to select
fig.update_layout(title="Check", width=500, height=500, xaxis_range=[-0.5, 9.5], yaxis_range=[-0.5, 9.5])
event = st.plotly_chart(fig, key="chart", width="content", on_select="rerun", selection_mode=("points", "box"))
st.write(f"z00={z[0, 0]:.6f} selected={len(event.selection.points)}")
"""


def check(browser, patch: str) -> dict:
    """What a reader does still works with ``patch``: a rerun with new data redraws the chart with it, a click on
    a cell selects it (on_select="rerun" returns the point), the modebar is there, a narrower window resizes it."""
    drawn_z00 = "() => document.querySelector('.js-plotly-plot')._fullData[0].z[0][0].toFixed(6)"
    said = "() => document.querySelector('[data-testid=stMarkdown]')?.innerText ?? ''"
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "check.py").write_text(textwrap.dedent(CHECK_PAGE))
        with streamlit_server(script="check.py", root=Path(tmp)) as url:
            context = browser.new_context(viewport=VIEWPORT)
            context.add_init_script(COUNT)
            context.add_init_script(patch)
            page = context.new_page()
            page.goto(url)
            page.wait_for_selector(".js-plotly-plot .main-svg", timeout=120_000)
            wait_until_idle(page)
            page.wait_for_timeout(1000)
            out["first"] = {"text": page.evaluate(said), "drawn_z00": page.evaluate(drawn_z00)}
            out["modebar_buttons"] = page.locator(".js-plotly-plot .modebar-btn").count()
            box = page.get_by_label("seed")
            box.fill("1")
            box.press("Enter")
            wait_until_idle(page)
            page.wait_for_timeout(1500)
            out["after_rerun"] = {"text": page.evaluate(said), "drawn_z00": page.evaluate(drawn_z00)}
            drag = page.locator(".js-plotly-plot .nsewdrag").first.bounding_box()
            x, y = drag["x"] + drag["width"] * 0.35, drag["y"] + drag["height"] * 0.65  # the marker at (3, 3)
            page.mouse.move(x, y)  # Plotly clicks the point it hovers
            page.locator(".hoverlayer .hovertext").first.wait_for(timeout=10_000)
            page.mouse.click(x, y)
            wait_until_idle(page)
            page.wait_for_timeout(1500)
            out["after_click"] = {"text": page.evaluate(said)}
            page.set_viewport_size({"width": 420, "height": 900})
            page.wait_for_timeout(2000)
            out["narrow_width"] = page.evaluate("() => document.querySelector('.js-plotly-plot')._fullLayout.width")
            out["draws"] = per_chart(page.evaluate(COLLECT))
            context.close()
    return out


def measure(pages: list[str], patches: dict[str, str | None], runs: int) -> dict:
    """``{page: {variant: [visit, ...]}}``: every page, each variant (no patch / a patch), ``runs`` visits."""
    results: dict = {page: {name: [] for name in patches} for page in pages}
    with chromium_browser() as browser, tempfile.TemporaryDirectory() as tmp:
        for page in pages:
            if page in MINIMAL:
                (Path(tmp) / f"{page}.py").write_text(textwrap.dedent(MINIMAL[page]))
                server = streamlit_server(script=f"{page}.py", root=Path(tmp))
                path, charts = "", 1
            else:
                server = streamlit_server(timeout=300, script="serve.py")
                path, charts = ATTNVIZ[page]
            with server as url:
                for _ in range(runs):
                    for name, patch in patches.items():  # interleaved: each variant sees the same machine
                        found = visit(browser, url, path, charts, patch)
                        results[page][name].append({**found, "charts_per_gd": per_chart(found)})
                        print(table({page: {name: results[page][name][-1:]}}), file=sys.stderr, flush=True)
    return results


def table(results: dict) -> str:
    lines = []
    for page, variants in results.items():
        for name, visits in variants.items():
            for i, found in enumerate(visits):
                keys = ", ".join(k["key"] or "?" for k in found["keys"])
                lines.append(f"{page} [{name}] visit {i + 1}: {found['charts']} charts ({keys}); "
                             f"first .main-svg {found['first_svg'] / 1000:.2f} s")  # fmt: skip
                for row in found["charts_per_gd"]:
                    lines.append(
                        f"  chart #{row['gd']}: draws {row['draws']} (by call {row['draws_by_call']}), "
                        f"afterplot {row['afterplot']}, main-thread ms per call {row['react_sync_ms']}, "
                        f"calls {row['calls']}, asked {row['asked']}, sizes {row['sizes']}, "
                        f"first draw {row['first_draw_ms'] and row['first_draw_ms'] / 1000:.2f} s, "
                        f"settled {row['last_draw_end_ms'] and row['last_draw_end_ms'] / 1000:.2f} s"
                    )
            draws = [row["draws"] for found in visits for row in found["charts_per_gd"]]
            firsts = [found["first_svg"] for found in visits if found["first_svg"]]
            if draws:
                lines.append(
                    f"{page} [{name}]: draws per chart max {max(draws)}, mean {statistics.mean(draws):.2f}; "
                    f"first chart median {statistics.median(firsts) / 1000:.2f} s"
                )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--page", choices=[*MINIMAL, *ATTNVIZ], action="append", help="default: all")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--patch", type=Path, help="a script added before the page's own (a fix to measure)")
    parser.add_argument("--compare", type=Path, help="as --patch, and each page also without it")
    parser.add_argument("--check", type=Path, help="only check that a patch keeps reruns, clicks and the modebar")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.check:
        with chromium_browser() as browser:
            print(json.dumps(check(browser, args.check.read_text()), indent=2))
        return
    patches: dict[str, str | None] = {"as is": None}
    if args.patch:
        patches = {args.patch.name: args.patch.read_text()}
    if args.compare:
        patches = {"as is": None, args.compare.name: args.compare.read_text()}
    results = measure(args.page or [*MINIMAL, *ATTNVIZ], patches, args.runs)
    print(json.dumps(results, indent=2) if args.json else table(results))


if __name__ == "__main__":
    main()

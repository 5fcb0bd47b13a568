"""Every page at every length: ``python -m benchmarks.pages [--tokens 2048 8192] [--model smollm2] [--json]``.

For each length, a fresh Python opens the app through AppTest (the server's
script runs, without a browser), chooses the model, Max tokens and a text at
least that long, and opens every page in menu order. Per page it reports the
time to draw (the first page that needs the record pays the capture; later
pages read it from the result cache, as a visitor's second page does), the
process's peak RSS while it drew, and what it shows: charts, charts without
a finite value (drawn empty), tables, and the first message it gives (where a
page reads fewer tokens than asked, that message says so first). An exception
is reported as its first line. ``--model default`` is the embedded model at
its defaults, ``--model embedded-budget`` the largest embedded model one request
may capture at that length (d_model 1,024, 64 heads, as many layers as fit).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = (
    "overview",
    "heads",
    "tokens",
    "head_roles",
    "parity",
    "generation",
    "padding",
    "masks",
    "kv_cache",
    "scaling",
    "training",
    "walkthrough",
    "cost",
)


def _finite(value) -> bool:
    import numpy as np

    from tests.plotly_json import decode

    try:
        array = np.asarray(decode(value), dtype=float)
    except (TypeError, ValueError):
        return bool(value)
    return bool(np.isfinite(array).any())


def _chart_has_data(element) -> bool:
    """Whether a chart holds at least one finite number in a trace (a heatmap of only NaN is drawn grey)."""
    spec = json.loads(element.proto.spec)
    for trace in spec.get("data", []):
        for axis in ("z", "y", "x", "values"):
            if axis in trace and _finite(trace[axis]):
                return True
    return False


def _first_message(at) -> str:
    for kind in ("error", "warning", "info", "caption"):
        for element in getattr(at, kind):
            text = str(getattr(element, "value", "") or getattr(element, "body", ""))
            if text:
                return f"{kind}: {text.splitlines()[0][:110]}"
    return ""


def run_here(tokens: int, model: str) -> list[dict]:
    from streamlit.testing.v1 import AppTest

    from attnviz import settings
    from attnviz.labs.cost.capture_bench import benchmark_text
    from attnviz.labs.cost.peak_memory import reset_peak_rss, status_bytes

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=3600).run()
    if model == "embedded-budget":  # the largest embedded model one request may capture at this length
        n_layer = min(settings.N_LAYER.high, settings.REQUEST_HEAD_TOKENS // (settings.N_HEAD.high * tokens))
        for key, value in (("d_model", settings.D_MODEL.high), ("n_head", settings.N_HEAD.high), ("n_layer", n_layer)):
            at.number_input(key=key).set_value(value)
    elif model != "default":
        at.selectbox(key="model").set_value(model)
    at.number_input(key="max_tokens").set_value(tokens)
    reset_peak_rss()
    start = time.perf_counter()
    at.text_area(key="text").input(benchmark_text(tokens)).run()  # the landing page draws: the capture runs here
    rows = [
        {
            "page": "(paste)",
            "tokens": tokens,
            "model": model,
            "seconds": round(time.perf_counter() - start, 2),
            "peak_rss_mb": round((status_bytes("VmHWM") or 0) / 2**20),
            "charts": len(list(at.get("plotly_chart"))),
            "empty_charts": 0,
            "tables": 0,
            "exception": at.exception[0].message.splitlines()[0][:160] if at.exception else None,
            "message": "the text is pasted on the landing page (Overview): the capture runs",
        }
    ]
    for name in PAGES:
        reset_peak_rss()
        start = time.perf_counter()
        at.switch_page(f"pages/{name}.py").run()
        seconds = time.perf_counter() - start
        charts = list(at.get("plotly_chart"))
        rows.append(
            {
                "page": name,
                "tokens": tokens,
                "model": model,
                "seconds": round(seconds, 2),
                "peak_rss_mb": round((status_bytes("VmHWM") or 0) / 2**20),
                "charts": len(charts),
                "empty_charts": sum(not _chart_has_data(c) for c in charts),
                "tables": len(at.dataframe) + len(at.table),
                "exception": at.exception[0].message.splitlines()[0][:160] if at.exception else None,
                "message": _first_message(at),
            }
        )
    return rows


def run(tokens: Sequence[int], model: str, timeout_s: float = 5400.0) -> list[dict]:
    """Each length in a fresh Python (its own peak RSS and a cold result cache)."""
    from attnviz.labs.cost.peak_memory import run_child

    rows = []
    for n in tokens:
        proc = run_child(["-m", "benchmarks.pages", "--child", str(n), model], timeout_s, fixed_malloc=False)
        if proc.returncode != 0:
            tail = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
            rows.append({"page": "*", "tokens": n, "model": model, "failed": tail[0]})
            continue
        rows.extend(json.loads(proc.stdout.strip().splitlines()[-1]))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--child", nargs=2, metavar=("TOKENS", "MODEL"), help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_here(int(args.child[0]), args.child[1])))
        return 0
    rows = run(args.tokens, args.model)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'page':<12} {'tokens':>6} {'s':>7} {'peak MB':>8} {'charts':>6} {'empty':>5} {'tables':>6}  shows / says")
    for r in rows:
        if r.get("failed"):
            print(f"{r['page']:<12} {r['tokens']:>6}  failed: {r['failed']}")
            continue
        says = f"EXCEPTION {r['exception']}" if r["exception"] else r["message"]
        print(
            f"{r['page']:<12} {r['tokens']:>6} {r['seconds']:>7.1f} {r['peak_rss_mb']:>8,} {r['charts']:>6} "
            f"{r['empty_charts']:>5} {r['tables']:>6}  {says}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Sessions arriving and leaving a shared server, its memory sampled: ``python -m benchmarks.soak [--json]``.

One server (``streamlit run serve.py``, what ``make run`` and the container image run) with a budget for work
in flight (``--memory-mb``, ATTNVIZ_MEMORY_MB) and a result cache (``--cache-mb``, ATTNVIZ_CACHE_MB). After a
first visitor has loaded SmolLM2 and left, the server's RSS is the base. Then ``--sessions`` visitors arrive
evenly over ``--duration-s`` (a Chromium context each, one browser): each opens the Heads page on SmolLM2 at
``--tokens``, submits a text of its own (a new capture: none is a cache hit), waits until the page has drawn
it, stays idle ``--stay-s`` with its result on screen, and leaves (closes its tab). The server's RSS (its
process tree, VmRSS) is sampled every second throughout and ``--settle-s`` after the last visitor left.

Reported: the peak RSS (the samples' and the kernel's VmHWM) and the final RSS, against ``base + budget +
cache`` (``bound_mb``): what runs is admitted within the budget and what finished stays within the cache, so an
idle session must hold nothing large of its own. Before issue 27 each idle session kept its last record alive
(its download buttons' callables held it) and every capture left about 0.8 x its record in glibc's arenas
(see attnviz/app/cache.py). Also: every visitor's time from submission to its chart, the sessions open at
once, and the bytes the server admitted in flight (from its log).

Defaults: issue 27's figure, 20 sessions over 10 minutes, at 512 tokens (a 192 MB record, quick to capture on
2 cores; the cache of 512 MB holds two, so most idle sessions show a record the cache has dropped).
``--root`` serves another checkout (``/work/before``, the code before the fix).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

from benchmarks.admission import DONE, Sampler, admissions, long_text, rss_kb, tree_pids
from benchmarks.concurrency import Session, percentile

ROOT = Path(__file__).resolve().parents[1]


async def visitor(browser, url: str, index: int, arrive_s: float, t0: float, args, open_now: list[int]) -> dict:
    """One visitor: arrive at ``t0 + arrive_s``, capture a text of its own, stay idle, leave."""
    await asyncio.sleep(max(0.0, t0 + arrive_s - time.monotonic()))
    arrived = time.monotonic()
    open_now.append(1)
    try:
        session = await Session.open(browser, url, f"/heads?model=smollm2&max_tokens={args.tokens}")
        submitted = time.monotonic()
        await session.submit("Text to analyse", long_text(index, args.tokens + 64 * (index + 1)))
        shown = json.dumps(f"{args.tokens:,}")
        await session.page.wait_for_function(f"({DONE})({shown})", timeout=args.timeout_s * 1000, polling=500)
        drawn = time.monotonic()
        errors = await session.page.locator('[data-testid="stException"]').count()
        await asyncio.sleep(args.stay_s)  # idle, its result on screen
        page_errors = list(session.errors)
        await session.close()
    finally:
        open_now.pop()
    return {
        "index": index,
        "arrived_s": round(arrived - t0, 1),
        "result_s": drawn - submitted,
        "left_s": round(time.monotonic() - t0, 1),
        "exceptions": errors,
        "page_errors": page_errors,
    }


async def soak(url: str, args, on_base) -> tuple[list[dict], int]:
    """The warm-up visitor, then every visitor; the results and the most sessions open at once."""
    from playwright.async_api import async_playwright

    from tools.browser import CHROMIUM_FLAGS, chromium_path

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS, headless=True)
        first = await Session.open(browser, url, f"/heads?model=smollm2&max_tokens={args.tokens}")  # loads SmolLM2
        await first.close()
        await asyncio.sleep(5)
        on_base()
        open_now: list[int] = []
        most = [0]

        async def count():
            while True:
                most[0] = max(most[0], len(open_now))
                await asyncio.sleep(0.5)

        counter = asyncio.create_task(count())
        step = (args.duration_s - args.stay_s) / max(1, args.sessions - 1)
        t0 = time.monotonic()
        results = await asyncio.gather(
            *(visitor(browser, url, i, i * step, t0, args, open_now) for i in range(args.sessions))
        )
        counter.cancel()
        await browser.close()
    return results, most[0]


def run(args) -> dict:
    from attnviz.core.capture import predicted_nbytes
    from tools.browser import streamlit_server

    env = {
        "ATTNVIZ_MEMORY_MB": str(args.memory_mb),
        "ATTNVIZ_CACHE_MB": str(args.cache_mb),
        "ATTNVIZ_HOSTED": "1",
        **dict(item.split("=", 1) for item in args.env),
    }
    root = Path(args.root).resolve()
    server: dict = {}
    load_before = os.getloadavg()
    start = time.monotonic()
    with streamlit_server(
        timeout=180, script=args.script, env=env, root=root, on_start=lambda proc: server.update(pid=proc.pid)
    ) as url:
        log_path = ROOT / ".pytest_cache" / f"streamlit-{url.rsplit(':', 1)[1]}.log"
        sampler = Sampler(server["pid"], every_s=1.0)

        def on_base():
            server["base_kb"] = sampler.now_kb()
            server["log_offset"] = len(log_path.read_text(errors="replace"))
            sampler.start()

        results, most_open = asyncio.run(soak(url, args, on_base))
        time.sleep(args.settle_s)  # every visitor gone; what the server still holds
        sampler.stop()
        final_kb = sampler.now_kb()
        hwm_kb = max(rss_kb(pid, "VmHWM") for pid in tree_pids(server["pid"]))
        log_text = log_path.read_text(errors="replace")[server["log_offset"] :]
    admitted = [a for a in admissions(log_text) if a["mb"] > 1]
    base_mb = server["base_kb"] / 1024
    peak_mb = max(sampler.peak_kb, hwm_kb) / 1024
    bound_mb = base_mb + args.memory_mb + args.cache_mb
    times = sorted(r["result_s"] for r in results)
    return {
        "script": args.script,
        "root": str(root),
        "sessions": args.sessions,
        "duration_s": args.duration_s,
        "stay_s": args.stay_s,
        "tokens": args.tokens,
        "record_mb": round(predicted_nbytes(30, 9, 3, 64, args.tokens) / 2**20),
        "budget_mb": args.memory_mb,
        "cache_mb": args.cache_mb,
        "results": sum(r["exceptions"] == 0 and not r["page_errors"] for r in results),
        "result_p50_s": round(percentile(times, 0.5), 1),
        "result_p95_s": round(percentile(times, 0.95), 1),
        "result_max_s": round(times[-1], 1),
        "most_sessions_open": most_open,
        "last_left_s": max(r["left_s"] for r in results),
        "admissions": len(admitted),
        "max_in_flight_mb": max((a["in_flight_mb"] for a in admitted), default=0),
        "base_rss_mb": round(base_mb),
        "peak_rss_mb": round(peak_mb),
        "final_rss_mb": round(final_kb / 1024),
        "bound_mb": round(bound_mb),
        "peak_within_bound": peak_mb <= bound_mb,
        "final_within_base_and_cache": final_kb / 1024 <= base_mb + args.cache_mb,
        "rss_timeline_mb": sampler.timeline_mb,  # every 5 s from the base on
        "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "total_s": round(time.monotonic() - start, 1),
        "server_env": {k: v for k, v in env.items() if k not in ("ATTNVIZ_HOSTED",)},
        "page_errors": [e for r in results for e in r["page_errors"]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="indent the JSON row")
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--duration-s", type=float, default=600, help="the last visitor arrives stay-s before this")
    parser.add_argument("--stay-s", type=float, default=90, help="how long a visitor stays idle with its result")
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--memory-mb", type=int, default=1024)
    parser.add_argument("--cache-mb", type=int, default=512)
    parser.add_argument("--settle-s", type=float, default=30, help="after the last visitor left")
    parser.add_argument("--timeout-s", type=float, default=1800, help="one visitor's wait for its result")
    parser.add_argument("--script", default="serve.py")
    parser.add_argument("--root", default=str(ROOT), help="the checkout to serve")
    parser.add_argument("--env", nargs="*", default=[], help="NAME=VALUE for the server's environment")
    args = parser.parse_args()
    print(json.dumps(run(args), indent=2 if args.json else None), flush=True)


if __name__ == "__main__":
    main()

"""Admission under load, measured: ``python -m benchmarks.admission [--json] [--tokens N] [--memory-mb MB]``.

Eight Chromium sessions (``--sessions``; one browser, one context each, :class:`benchmarks.concurrency.Session`)
open the Heads page on SmolLM2 at ``--tokens`` tokens (default 8,192) against one
``streamlit run app.py`` whose budget for work in flight is ``--memory-mb``
(ATTNVIZ_MEMORY_MB, default 6,144), whose result cache is ``--cache-mb``
(ATTNVIZ_CACHE_MB, default 1,024: one 8,192-token record) and whose running cap is the
server's own (ATTNVIZ_MAX_RUNNING, one per two cores; ``--max-running`` sets it). At the
same moment each submits a text of its own (none is a cache hit). Measured:

- every session's result drawn (the page's "only the first N are shown" note, its charts, an idle script), and
  no page error;
- the waits: from submission until the page last said "Waiting in the queue" (0 for a request admitted at once), and
  until the result was drawn, p50 and p95; the queue places the pages showed;
- the server's memory: its peak RSS (VmHWM, whole process: Streamlit runs every session in one) and its RSS once
  every session is idle with its result on screen, against ``base + budget + cache`` (``bound_mb``), where base
  is its RSS with SmolLM2 loaded and every session open, before the load (the models and the process), and the
  cache's bound holds the results finished requests leave behind. An idle session holds nothing large of its
  own: before issue 27 each kept its last record alive through its download buttons, and each capture left
  about 0.8 x its record in glibc's arenas (``benchmarks/soak.py`` measures sessions coming and going);
- the admitted bytes in flight and the running cap, from the log: never above the budget (a request over the
  whole budget would run alone; none is here).

``tests/integration/deploy/test_admission.py`` runs the same scenario scaled down (2,048 tokens, a budget for two requests).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from attnviz.settings import MAX_RUNNING_ENV
from benchmarks.concurrency import IDLE, WORDS, Session, percentile

CAP = re.compile(r"at most (\d+) running at once")
ADMITTED = re.compile(r"attnviz: admitted ([\d,]+) MB, in flight ([\d,]+) MB of ([\d,]+) MB, (\d+) waiting")
PLACE = re.compile(r"Waiting in the queue: (?:place (\d+) of (\d+)|next in line \((\d+) waiting\))")
# the result drawn: the truncation note for this many tokens, every chart drawn, the script idle, nobody waiting
DONE = """n => {
    if (IDLE !== 'notRunning') return false;
    const main = document.querySelector('[data-testid="stMain"]')?.innerText || '';
    if (main.includes('Waiting in the queue') || !main.includes('only the first ' + n + ' are shown')) return false;
    const plots = [...document.querySelectorAll('.js-plotly-plot')];
    return plots.length >= 3 && plots.every(p => p.querySelector('.main-svg'));
}""".replace("IDLE", IDLE)
RUNNING = f"() => {IDLE} === 'running'"


def long_text(session: int, n_words: int) -> str:
    """A text of its own per session, longer than the token limit (each word is at least one token)."""
    words = [WORDS[(session * 7 + i) % len(WORDS)] for i in range(n_words)]
    return f"Session {session} speaks: " + " ".join(words) + "."


def rss_kb(pid: int, field_name: str = "VmRSS") -> int:
    """A process's resident memory (``VmRSS``) or its peak (``VmHWM``) in kB, from /proc/<pid>/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field_name} for process {pid}")


def tree_pids(pid: int) -> list[int]:
    """The process and its descendants (Streamlit normally has none)."""
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            with contextlib.suppress(OSError):  # the task ended while we looked
                todo.extend(int(c) for c in (task / "children").read_text().split())
    return pids


@dataclass
class Sampler:
    """The server tree's RSS, summed and sampled every ``every_s`` in a thread; its peak."""

    pid: int
    every_s: float = 0.25
    peak_kb: int = 0
    timeline_mb: list[int] = field(default_factory=list)  # the RSS every 5 s, to see where it went
    _stop: threading.Event = field(default_factory=threading.Event)

    def now_kb(self) -> int:
        total = 0
        for pid in tree_pids(self.pid):
            with contextlib.suppress(OSError, RuntimeError):  # the process ended while we looked
                total += rss_kb(pid)
        return total

    def start(self) -> Sampler:
        def loop():
            n = 0
            while not self._stop.is_set():
                now = self.now_kb()
                self.peak_kb = max(self.peak_kb, now)
                if n % round(5 / self.every_s) == 0:
                    self.timeline_mb.append(round(now / 1024))
                n += 1
                self._stop.wait(self.every_s)

        threading.Thread(target=loop, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()


QUEUE_SHOWN_MS = 120_000  # a request submitted while others wait is queued at once (strict FIFO): its page says so


async def cancel_and_rerun(session: Session, timeout_ms: int) -> float:
    """Click Cancel while the page waits, see "Cancelled", click "Run it again"; seconds from the click until the
    page said it was cancelled."""
    await session.page.get_by_text("Waiting in the queue").first.wait_for(timeout=min(timeout_ms, QUEUE_SHOWN_MS))
    clicked = time.monotonic()
    await session.page.get_by_role("button", name="Cancel", exact=True).click()
    await session.page.get_by_text("Cancelled: this request left the queue").wait_for(timeout=timeout_ms)
    seen = time.monotonic() - clicked
    await session.page.get_by_role("button", name="Run it again", exact=True).click()
    return seen


async def one(
    session: Session, text: str, tokens: int, timeout_ms: int, queued: asyncio.Event, cancel: bool = False
) -> dict:
    """Submit ``text`` and wait for its result; the places the page showed on the way (``queued`` is set at the first
    place any page shows). ``cancel``: submit only once another request waits (so this one is sure to queue, whatever
    order the sessions' submissions reach the server in), cancel it once while it waits, then run it again (the
    result is still awaited)."""
    places, of = [], []
    if cancel:
        await asyncio.wait_for(queued.wait(), timeout_ms / 1000)
    start = time.monotonic()
    waited_until = start  # the last moment the page said it was waiting
    await session.submit("Text to analyse", text)
    await session.page.wait_for_function(RUNNING, timeout=timeout_ms)
    cancelled_s = await cancel_and_rerun(session, timeout_ms) if cancel else None
    deadline = start + timeout_ms / 1000
    shown = f"{tokens:,}"
    while True:
        main = await session.page.locator('[data-testid="stMain"]').inner_text()
        for match in PLACE.finditer(main):
            waited_until = time.monotonic()
            queued.set()
            if match.group(1):
                places.append(int(match.group(1)))
                of.append(int(match.group(2)))
            else:
                places.append(1)
                of.append(int(match.group(3)))
        if await session.page.evaluate(f"({DONE})({json.dumps(shown)})"):
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"no result after {timeout_ms / 1000:.0f} s; the page shows:\n{main[:1500]}")
        await asyncio.sleep(0.4)
    errors = await session.page.locator('[data-testid="stException"]').count()
    return {
        "seconds": time.monotonic() - start,
        "wait_s": waited_until - start,
        "max_place": max(places, default=0),
        "max_of": max(of, default=0),
        "exceptions": errors,
        "cancelled_s": cancelled_s,
    }


async def drive(
    url: str, n_sessions: int, tokens: int, timeout_ms: int, before=None, cancel_last: bool = False
) -> list[dict]:
    """Open ``n_sessions`` on SmolLM2 at ``tokens``; call ``before()`` once all are idle; submit and wait (the last
    session cancels once and runs again, with ``cancel_last``)."""
    from playwright.async_api import async_playwright

    from tools.browser import CHROMIUM_FLAGS, chromium_path

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS, headless=True)
        sessions = []
        for _ in range(n_sessions):  # one after another: the first loads SmolLM2, the rest find it loaded
            sessions.append(await Session.open(browser, url, f"/heads?model=smollm2&max_tokens={tokens}"))
        if before is not None:
            before()
        texts = [long_text(s, tokens + 64 * (s + 1)) for s in range(n_sessions)]
        last, queued = n_sessions - 1, asyncio.Event()
        results = await asyncio.gather(
            *(
                one(s, text, tokens, timeout_ms, queued, cancel=cancel_last and i == last)
                for i, (s, text) in enumerate(zip(sessions, texts, strict=True))
            )
        )
        for session, result in zip(sessions, results, strict=True):
            result["page_errors"] = list(session.errors)
        await asyncio.gather(*(s.close() for s in sessions))
        await browser.close()
    return results


def admissions(log_text: str) -> list[dict]:
    """Each admission the server logged: its MB, the MB in flight after it, the budget, and how many waited."""
    return [
        {
            "mb": int(a.replace(",", "")),
            "in_flight_mb": int(b.replace(",", "")),
            "budget_mb": int(c.replace(",", "")),
            "waiting": int(d),
        }
        for a, b, c, d in ADMITTED.findall(log_text)
    ]


def scenario(
    n_sessions: int,
    tokens: int,
    memory_mb: int,
    cache_mb: int,
    timeout_s: float,
    server_env: dict | None = None,
    cancel_last: bool = False,
) -> dict:
    """Serve, load, measure; the figures this module's docstring lists. ``server_env``: more of the server's
    environment (e.g. the allocator's settings); ``cancel_last``: the last session cancels once while it waits."""
    from tools.browser import ROOT, streamlit_server

    env = {"ATTNVIZ_MEMORY_MB": str(memory_mb), "ATTNVIZ_CACHE_MB": str(cache_mb), "ATTNVIZ_HOSTED": "1"}
    env.update(server_env or {})
    server: dict = {}
    start, load_before = time.monotonic(), os.getloadavg()[0]
    with streamlit_server(env=env, on_start=lambda proc: server.update(pid=proc.pid)) as url:
        log_path = ROOT / ".pytest_cache" / f"streamlit-{url.rsplit(':', 1)[1]}.log"
        sampler = Sampler(server["pid"])

        def before():
            server["base_kb"] = sampler.now_kb()
            server["log_offset"] = len(log_path.read_text(errors="replace"))
            server["load_start"] = time.monotonic()
            sampler.start()

        results = asyncio.run(drive(url, n_sessions, tokens, int(timeout_s * 1000), before, cancel_last))
        load_s = time.monotonic() - server["load_start"]
        sampler.stop()
        server["end_kb"] = sampler.now_kb()  # every session idle, its result drawn
        hwm_kb = max(rss_kb(pid, "VmHWM") for pid in tree_pids(server["pid"]))
        whole_log = log_path.read_text(errors="replace")
        log_text = whole_log[server["log_offset"] :]
    cap = CAP.search(whole_log)  # logged at the first admission: the server's running cap
    admitted = [a for a in admissions(log_text) if a["mb"] > 1]  # the sessions' own requests (none of the tiny ones)
    done = sorted(r["seconds"] for r in results)
    waits = sorted(r["wait_s"] for r in results)
    base_mb, peak_mb = server["base_kb"] / 1024, max(hwm_kb, sampler.peak_kb) / 1024
    return {
        "sessions": n_sessions,
        "tokens": tokens,
        "budget_mb": memory_mb,
        "cache_mb": cache_mb,
        "max_running": int(cap.group(1)) if cap else None,
        "results": sum(r["exceptions"] == 0 and not r["page_errors"] for r in results),
        "wait_p50_s": round(percentile(waits, 0.5), 1),
        "wait_p95_s": round(percentile(waits, 0.95), 1),
        "result_p50_s": round(percentile(done, 0.5), 1),
        "result_p95_s": round(percentile(done, 0.95), 1),
        "result_max_s": round(done[-1], 1),
        "max_place_seen": max(r["max_place"] for r in results),
        "max_queue_seen": max(r["max_of"] for r in results),
        "sessions_that_waited": sum(r["max_place"] > 0 for r in results),
        "admissions": len(admitted),
        "admitted_mb": sorted({a["mb"] for a in admitted}),
        "max_in_flight_mb": max((a["in_flight_mb"] for a in admitted), default=0),
        "max_waiting_logged": max((a["waiting"] for a in admitted), default=0),
        "base_rss_mb": round(base_mb),
        "peak_rss_mb": round(peak_mb),
        "bound_mb": round(base_mb + memory_mb + cache_mb),
        "end_rss_mb": round(server["end_kb"] / 1024),  # every session idle, its result on screen
        "load_s": round(load_s, 1),
        "total_s": round(time.monotonic() - start, 1),
        "page_errors": [e for r in results for e in r["page_errors"]],
        "cancelled_seen_after_s": [round(r["cancelled_s"], 1) for r in results if r["cancelled_s"] is not None],
        "rss_timeline_mb": sampler.timeline_mb,
        "server_env": server_env or {},
        "load_average_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--memory-mb", type=int, default=6144)
    parser.add_argument("--cache-mb", type=int, default=1024)
    parser.add_argument("--timeout-s", type=float, default=3600)
    parser.add_argument("--max-running", type=int, help="ATTNVIZ_MAX_RUNNING (default: the server's, by its cores)")
    parser.add_argument("--env", nargs="*", default=[], help="NAME=VALUE for the server's environment")
    args = parser.parse_args()
    env = dict(item.split("=", 1) for item in args.env)
    if args.max_running is not None:
        env[MAX_RUNNING_ENV] = str(args.max_running)
    row = scenario(args.sessions, args.tokens, args.memory_mb, args.cache_mb, args.timeout_s, env)
    print(json.dumps(row, indent=2 if args.json else None), flush=True)


if __name__ == "__main__":
    main()

"""Two replicas behind nginx, for real: sticky sessions, correct results, and recovery when a replica stops.

``deploy/replicas.py`` starts two ``serve.py`` replicas and Debian's nginx on loopback ports. Four Chromium
sessions (contexts of one browser, driven at once by :class:`benchmarks.concurrency.Session`), two routed to each
replica, open their own link to the Heads page. Then one replica is stopped: its two sessions reconnect through
nginx to the other, which rebuilds them from their links and says so; the other two are undisturbed.
"""

import asyncio
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import pytest

from attnviz.app.static_assets import PLOTLY, chunk_file, streamlit_static_dir
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.models.record import token_labels
from benchmarks.concurrency import ROOT_TIMEOUT_MS, Session
from tests.integration.chromium import NO_TOUR_WARM
from tools.browser import CHROMIUM_FLAGS, ROOT, chromium_path, free_port

pytestmark = pytest.mark.browser

START_TIMEOUT_S = 300  # two replicas warm up at once on a busy 2-core machine (about 10 s quiet)
MOVED = "The server that held your session stopped; this one rebuilt it from the link: results are computed again."
ALERT = '[data-testid="stAlert"]'
LANTERN = "A lantern glowed above the door."  # typed later in a session that stays on its replica


@dataclass(frozen=True)
class Person:
    text: str
    word: str  # a word no other text has: its large view shows it
    head: tuple[int, int]
    replica: str  # where its route cookie sends it


PEOPLE = [
    Person("The apple fell from the tree near the river.", "apple", (1, 3), "r0"),
    Person("A guitar played softly in the empty hall.", "guitar", (0, 2), "r0"),
    Person("Every mountain has a quiet valley below it.", "mountain", (1, 1), "r1"),
    Person("She poured coffee and opened the window.", "coffee", (0, 0), "r1"),
]


def get(url: str, cookie: str | None = None):
    request = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return resp.status, resp.headers


@pytest.fixture(scope="module")
def replicas():
    if shutil.which("nginx") is None and not os.access("/usr/sbin/nginx", os.X_OK):
        pytest.fail("Debian's nginx is not installed: run `make browser` (apt-get install nginx)")
    # nginx started by root runs its workers as nobody, who must reach the run directory (pytest's is root's 0700)
    run_dir = Path(tempfile.mkdtemp(prefix="attnviz-replicas-"))
    run_dir.chmod(0o755)
    port, ports = free_port(), [free_port(), free_port()]
    cmd = [sys.executable, str(ROOT / "deploy" / "replicas.py"), "--port", str(port),
           "--ports", ",".join(map(str, ports)), "--run-dir", str(run_dir)]  # fmt: skip
    log = open(run_dir / "replicas.out", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **NO_TOUR_WARM})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "replicas behind" not in (run_dir / "replicas.out").read_text():
            assert proc.poll() is None, (run_dir / "replicas.out").read_text()
            assert time.monotonic() < deadline, "the replicas did not start"
            time.sleep(0.5)
        yield url, run_dir, json.loads((run_dir / "replicas.json").read_text())
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=60) == 0  # Ctrl-C/SIGTERM stops everything it started, cleanly
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()
            shutil.rmtree(run_dir, ignore_errors=True)


def routes_to(url: str) -> dict[str, list[str]]:
    """Route cookies that nginx's consistent hash sends to each replica (read from the header it adds)."""
    found: dict[str, list[str]] = {"r0": [], "r1": []}
    for i in range(200):
        key = f"visitor-{i}"
        _, headers = get(f"{url}/_stcore/health", f"attnviz_route={key}")
        found[headers["X-Attnviz-Replica"]].append(key)
        if all(len(keys) >= 2 for keys in found.values()):
            return found
    raise AssertionError(found)


async def open_session(browser, url: str, person: Person, route: str) -> Session:
    context = await browser.new_context(viewport={"width": 1400, "height": 1600})
    await context.add_cookies([{"name": "attnviz_route", "value": route, "url": url}])
    page = await context.new_page()
    session = Session(context, page)
    page.on("pageerror", lambda err: session.errors.append(str(err)))
    layer, head = person.head
    await page.goto(f"{url}/heads?{urlencode({'text': person.text, 'layer': layer, 'head': head})}")
    await session.drawn(person.word)
    return session


async def seen(session: Session) -> dict:
    page = session.page
    cookies = {c["name"]: c["value"] for c in await session.context.cookies()}
    return {
        "replica": cookies.get("attnviz_replica"),
        "captions": await page.locator('[data-testid="stCaptionContainer"]').all_inner_texts(),
        "ticks": await session.large_view_ticks(),
        "title": await page.locator(".js-plotly-plot").first.locator(".gtitle").text_content(),
        "text": await session.sidebar().locator("textarea").first.input_value(),
        "alerts": await page.locator(ALERT).all_inner_texts(),
        "exceptions": await page.locator('[data-testid="stException"]').all_inner_texts(),
        "errors": list(session.errors),
    }


def check_result(person: Person, got: dict) -> None:
    """The page shows this person's own tokens and token count and head, as the library computes them."""
    source = EmbeddedModel(EmbeddedConfig())
    tokens = source.encode(person.text, 256).tokens
    assert not got["exceptions"] and not got["errors"], (person.word, got)
    caption = next(c for c in got["captions"] if source.name in c)
    assert re.search(rf"\b{len(tokens)} tokens\b", caption), (person.word, len(tokens), caption)
    assert got["ticks"] == token_labels(tokens), (person.word, got["ticks"])
    layer, head = person.head
    assert got["title"].startswith(f"L{layer} H{head}"), (person.word, got["title"])
    assert got["text"] == person.text, (person.word, got["text"])


def stream_lines(run_dir, route: str) -> list[str]:
    """nginx's access-log lines for the websockets of one route (written when a websocket closes)."""
    log = (run_dir / "logs" / "access.log").read_text()
    return [line for line in log.splitlines() if "/_stcore/stream" in line and f"route={route} " in line]


async def scenario(url: str, run_dir, listing: dict, routes: dict[str, list[str]]) -> dict:
    from playwright.async_api import async_playwright

    route = {p.word: routes[p.replica][i % 2] for i, p in enumerate(PEOPLE)}
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS, headless=True)
        try:
            sessions = await asyncio.gather(*(open_session(browser, url, p, route[p.word]) for p in PEOPLE))
            before = [await seen(s) for s in sessions]
            # r0 stops (SIGTERM, as an orchestrator stops a replica): its sessions' websockets close
            pid = next(r["pid"] for r in listing["replicas"] if r["name"] == "r0")
            os.kill(pid, signal.SIGTERM)
            stopped = time.monotonic()
            moved = [(p, s) for p, s in zip(PEOPLE, sessions, strict=True) if p.replica == "r0"]
            for person, session in moved:  # the browser reconnects by itself: no click
                await session.page.locator(ALERT).filter(has_text=MOVED).wait_for(timeout=ROOT_TIMEOUT_MS)
                await session.drawn(person.word)
            recovered_s = time.monotonic() - stopped
            after = [await seen(s) for s in sessions]
            # a session on the surviving replica still works: a new text of its own, on the same replica
            person, session = PEOPLE[2], sessions[2]
            await session.type_in("Text to analyse", LANTERN)
            await session.drawn("lantern")
            still = await seen(session)
            open_streams = {p.word: stream_lines(run_dir, route[p.word]) for p in PEOPLE if p.replica == "r1"}
            for s in sessions:
                await s.close()
            return {"before": before, "after": after, "still": still, "recovered_s": recovered_s,
                    "open_streams": open_streams, "route": route}  # fmt: skip
        finally:
            await browser.close()


def test_streamlits_scripts_reach_the_visitor_gzipped_through_nginx(replicas):
    """A replica gzips Streamlit's scripts and page (serve.py); nginx passes that through, and the plain file to a
    client that does not accept gzip."""
    url, _, _ = replicas
    js = streamlit_static_dir() / "static" / "js"
    plotly = chunk_file(js, PLOTLY)
    data = (js / plotly).read_bytes()
    request = urllib.request.Request(f"{url}/static/js/{plotly}", headers={"Accept-Encoding": "gzip, br"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        body, headers = resp.read(), resp.headers
    assert headers["Content-Encoding"] == "gzip" and gzip.decompress(body) == data and len(body) < len(data) / 2
    assert "accept-encoding" in ", ".join(headers.get_all("Vary")).lower()
    with urllib.request.urlopen(f"{url}/static/js/{plotly}", timeout=30) as resp:
        assert resp.headers["Content-Encoding"] is None and resp.read() == data
    request = urllib.request.Request(f"{url}/heads", headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert resp.headers["Content-Encoding"] == "gzip"
        # serve.py's page: its own script asks for Plotly's chunk (attnviz.app.static_assets.with_early_modules)
        assert f'import("./static/js/{plotly}")' in gzip.decompress(resp.read()).decode()


def test_two_replicas_sticky_sessions_and_recovery_from_the_link(replicas):
    url, run_dir, listing = replicas
    # a first visit gets a route cookie from nginx ($request_id: 32 hex digits); the same cookie, the same replica
    status, headers = get(f"{url}/_stcore/health")
    cookies = " | ".join(headers.get_all("Set-Cookie"))
    assert status == 200 and re.search(r"attnviz_route=[0-9a-f]{32}; Path=/", cookies), cookies
    routes = routes_to(url)
    for name, keys in routes.items():
        for key in keys[:2]:
            assert {get(f"{url}/_stcore/health", f"attnviz_route={key}")[1]["X-Attnviz-Replica"] for _ in range(5)} == {
                name
            }

    got = asyncio.run(scenario(url, run_dir, listing, routes))

    for person, before in zip(PEOPLE, got["before"], strict=True):
        # each on the replica its route names (the cookie nginx set on its websocket's upgrade), each correct
        assert before["replica"] == person.replica, (person.word, before["replica"])
        check_result(person, before)
        assert not any(MOVED in alert for alert in before["alerts"]), (person.word, before["alerts"])
    for person, after in zip(PEOPLE, got["after"], strict=True):
        check_result(person, after)  # the same result, rebuilt from the link where the session moved
        if person.replica == "r0":
            assert after["replica"] == "r1" and any(MOVED in a for a in after["alerts"]), (person.word, after)
        else:
            assert after["replica"] == "r1" and not any(MOVED in a for a in after["alerts"]), (person.word, after)
    # the surviving replica's sessions never reconnected: their websockets were still open (none logged as closed)
    assert got["open_streams"] == {"mountain": [], "coffee": []}, got["open_streams"]
    still = got["still"]
    assert still["replica"] == "r1" and not any(MOVED in a for a in still["alerts"]), still
    check_result(Person(LANTERN, "lantern", PEOPLE[2].head, "r1"), still)
    # each moved session's websockets (logged as they closed): one on r0, then, after the failover, one on r1
    deadline = time.monotonic() + 30
    for person in PEOPLE[:2]:
        while True:
            lines = stream_lines(run_dir, got["route"][person.word])
            if len(lines) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert [re.search(r"replica=(\w+)", line).group(1) for line in lines] == ["r0", "r1"], lines
    # the script noticed, and says how long recovery took
    out = (run_dir / "replicas.out").read_text()
    assert "attnviz: replica r0 stopped" in out, out
    assert got["recovered_s"] < 120, got["recovered_s"]
    print(f"replicas: both moved sessions recovered {got['recovered_s']:.1f} s after r0 stopped")

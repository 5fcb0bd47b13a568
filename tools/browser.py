"""Real-browser helpers: serve the app with streamlit, drive Debian's chromium with Playwright.

Never `playwright install`: the browser is Debian's package, found on PATH.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


_PORTS_PER_WORKER = 400
_FIRST_PORT = 20_000  # below Linux's ephemeral range (32768-60999), where bind(0) and outgoing connections draw
_next_port = [random.randrange(_PORTS_PER_WORKER)]  # a random start: two runs side by side rarely meet


def _worker_index() -> int:
    """This pytest-xdist worker's number (gw3 -> 3); 0 outside xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker[2:]) if worker[2:].isdigit() else 0


def free_port() -> int:
    """A loopback port free now that no other test process of this run will also pick.

    Asking the kernel for port 0 and closing the socket races: another worker may be handed the same port before
    our server binds it, and a health check would then reach the wrong server. Each xdist worker instead draws in
    turn from its own block of ports below the ephemeral range, from a random start (another test run or a
    benchmark beside this one draws elsewhere in the block), skipping any that something else holds."""
    base = _FIRST_PORT + (_worker_index() % 30) * _PORTS_PER_WORKER
    for _ in range(_PORTS_PER_WORKER):
        port = base + _next_port[0] % _PORTS_PER_WORKER
        _next_port[0] += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {base}-{base + _PORTS_PER_WORKER - 1}")


@contextmanager
def streamlit_server(
    timeout: float = 90.0,
    script: str = "app.py",
    env: dict[str, str] | None = None,
    on_start=None,
    root: Path = ROOT,
    port: int | None = None,
) -> Iterator[str]:
    """Run ``streamlit run app.py`` (or ``script``, e.g. ``serve.py``) on a free port; yield its base URL.

    ``env``: variables added to the server's environment (e.g. ATTNVIZ_MEMORY_MB); ``on_start(proc)`` hears the
    server's ``subprocess.Popen`` once it answers (to sample its memory); ``root``: the checkout to serve (its own
    code first on ``PYTHONPATH``, as a benchmark serves an older tree). The health check counts only once this
    server has printed its own URL: Streamlit binds its port after the warm-up, so another process may answer
    on it meanwhile."""
    port = port or free_port()
    tree_env = {} if root == ROOT else {"PYTHONPATH": str(root)}
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(root / script),
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
    ]
    log_dir = ROOT / ".pytest_cache"
    log_dir.mkdir(exist_ok=True)
    log_path = log_dir / f"streamlit-{port}.log"
    log = open(log_path, "w")  # noqa: SIM115 (closed in the finally below)
    proc = subprocess.Popen(
        cmd,
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **tree_env, **(env or {})},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                    if resp.status == 200 and f":{port}" in log_path.read_text(errors="replace"):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not start (exit code {proc.poll()})")
            time.sleep(0.3)
        if on_start is not None:
            on_start(proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def chromium_path() -> str:
    path = shutil.which("chromium")
    if path is None:
        raise RuntimeError("Debian's chromium is not installed: run `make browser` (apt-get install chromium)")
    return path


@contextmanager
def chromium_browser() -> Iterator:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def wait_until_idle(page, timeout_ms: int = 120_000) -> None:
    """Wait for the script run that an interaction started (if any) to finish."""
    state = "document.querySelector('[data-testid=\"stApp\"]')?.getAttribute('data-test-script-state')"
    page.wait_for_selector('[data-testid="stApp"]', timeout=timeout_ms)
    with contextlib.suppress(Exception):  # the run was quicker than the poll, or nothing changed
        page.wait_for_function(f"() => {state} === 'running'", timeout=1_500)
    page.wait_for_function(f"() => {state} === 'notRunning'", timeout=timeout_ms)
    page.wait_for_timeout(200)


def set_sidebar_value(page, label: str, value: str, timeout_ms: int = 120_000) -> None:
    """Type into a sidebar input found by its label and commit it as a user does."""
    box = page.locator('[data-testid="stSidebar"]').get_by_label(label, exact=True)
    box.fill(value)
    box.press("Control+Enter" if box.evaluate("e => e.tagName") == "TEXTAREA" else "Enter")
    wait_until_idle(page, timeout_ms)


def wait_for_charts(page, count: int, timeout_ms: int = 90_000) -> None:
    """Wait until ``count`` plotly charts have been drawn (an SVG main layer each)."""
    page.wait_for_function(
        "n => document.querySelectorAll('.js-plotly-plot .main-svg').length >= n",
        arg=count,
        timeout=timeout_ms,
    )


GRID_CANVAS = (
    ".attnviz-grid canvas"  # the Heads page's grid (attnviz.app.grid_canvas; Playwright's CSS pierces its shadow root)
)


def wait_for_grid(page, timeout_ms: int = 90_000):
    """Wait until the Heads page's grid canvas has drawn; return its locator."""
    page.locator(f"{GRID_CANVAS}[data-draws]").first.wait_for(state="attached", timeout=timeout_ms)
    return page.locator(GRID_CANVAS).first


def grid_tile_point(page, layer: int, column: int) -> tuple[float, float]:
    """Where on the screen the grid's tile (``layer``, ``column``) is, its centre (the canvas says where its tiles are:
    ``data-tiles``); the canvas scrolled into view first."""
    canvas = wait_for_grid(page)
    canvas.scroll_into_view_if_needed()
    tiles = json.loads(canvas.get_attribute("data-tiles"))
    box = canvas.bounding_box()
    return box["x"] + tiles["left"] + (column + 0.5) * tiles["w"], box["y"] + tiles["top"] + (layer + 0.5) * tiles["h"]


def choose_page(page, title: str) -> None:
    """Open the page titled ``title`` from the menu, as a user does: the header's link, or its section's drop-down
    and the link there (on a narrow window Streamlit draws the menu in the sidebar: its link there)."""
    wait_until_idle(page)
    sidebar = page.locator('[data-testid="stSidebarNav"]')
    if sidebar.count():
        opener = page.locator('[data-testid="stExpandSidebarButton"]')
        if opener.is_visible():  # a narrow window starts with the sidebar closed
            opener.click()
        link = sidebar.get_by_text(title, exact=True)
        if not link.count():  # the menu shows ten pages until "View … more"
            sidebar.locator('[data-testid="stSidebarNavViewButton"]').click()
        link.click()
    else:
        menu = page.locator('[data-testid="stTopNav"]')
        link = menu.locator('[data-testid="stTopNavLink"]').filter(has=page.get_by_text(title, exact=True))
        if link.count():
            link.first.click()
        else:
            sections = menu.locator('[data-testid="stTopNavSection"]')
            for i in range(sections.count()):
                sections.nth(i).click()
                item = page.locator('[data-testid="stTopNavDropdownLink"]').filter(
                    has=page.get_by_text(title, exact=True)
                )
                if item.count():
                    item.first.click()
                    break
                page.keyboard.press("Escape")  # not in this section: close its drop-down
            else:
                raise LookupError(f"no page titled {title!r} in the menu")
    wait_until_idle(page)


def choose_sidebar_option(page, label: str, option: str) -> None:
    """Open a sidebar selectbox by its label and choose an option, as a user does.

    A selectbox filters its options as one types, so the option is typed and
    confirmed: that works however long the list and wherever it opens.
    """
    wait_until_idle(page)
    box = page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').filter(has_text=label).first
    box.click()
    page.keyboard.type(option)
    page.get_by_role("option", name=option, exact=True).click()
    page.evaluate("document.activeElement?.blur()")  # a focused box shows its text scrolled and a red outline
    wait_until_idle(page)

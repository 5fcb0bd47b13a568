"""What the example notebooks' tests share: a notebook of docs/notebooks/ executed once per module (tools.notebooks:
a fresh kernel of this venv, a temporary working folder), the views its outputs hold, and its saved page opened in
Chromium as a file with every other request refused."""

from __future__ import annotations

import ast
import json
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from attnviz.notebook.assets import viewer_script
from tools import notebooks

SHOTS = notebooks.ROOT / ".pytest_cache" / "notebook"  # screenshots of the pages, to look at after a run
VIEW_CALLS = {"head_view", "model_view", "show"}
CELL_TIMEOUT_S = 600  # a cell's limit: the slowest (2,000 tokens through SmolLM2, twice) takes 100 s on 2 busy cores
PAYLOAD = re.compile(r'<script type="application/json" id="(attnviz-[0-9a-f]+)-data">(.*?)</script>', re.DOTALL)


@dataclass
class Run:
    """A notebook executed top to bottom: the executed notebook, its working folder, its seconds, its page."""

    name: str
    notebook: object
    workdir: Path
    seconds: float
    pages: dict[bool, Path] = field(default_factory=dict)  # offline? -> the saved page

    def page(self, offline: bool = True) -> Path:
        """The notebook saved as HTML with nbconvert (``offline``: without the template's own CDN scripts)."""
        if offline not in self.pages:
            path = self.workdir / f"{self.name}{'' if offline else '-default'}.html"
            path.write_text(notebooks.to_html(self.notebook, offline=offline), encoding="utf-8")
            self.pages[offline] = path
        return self.pages[offline]


class Runs:
    """Each notebook executed the first time a test asks for it, then kept for the module's other tests."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="attnviz-nb-"))
        self.done: dict[str, Run] = {}

    def __getitem__(self, name: str) -> Run:
        if name not in self.done:
            workdir = self.root / name
            workdir.mkdir()
            start = time.perf_counter()
            executed = notebooks.execute(notebooks.NOTEBOOKS / f"{name}.ipynb", workdir, timeout=CELL_TIMEOUT_S)
            self.done[name] = Run(name, executed, workdir, time.perf_counter() - start)
        return self.done[name]

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def view_calls(source: str) -> int:
    """How many views a cell's code shows: its calls of head_view, model_view and show (``captured.show()`` among
    them) without ``html_action="return"`` (which gives the view back instead)."""
    shown = 0
    for node in ast.walk(ast.parse(source)):
        named = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in VIEW_CALLS
        if named or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "show"):
            action = next((k.value for k in node.keywords if k.arg == "html_action"), None)
            shown += not (isinstance(action, ast.Constant) and action.value == "return")
    return shown


def outputs_html(cell) -> list[str]:
    return [out["data"]["text/html"] for out in cell.get("outputs", []) if "text/html" in out.get("data", {})]


def views(run: Run) -> list[tuple[str, dict]]:
    """Every view the notebook's outputs hold, in order: (its element's id, its payload), each cell's as many as
    its code shows (an AssertionError names the cell that differs)."""
    found = []
    for cell in run.notebook.cells:
        if cell.cell_type != "code":
            continue
        html = "".join(outputs_html(cell))
        here = [(element, json.loads(text)) for element, text in PAYLOAD.findall(html)]
        assert len(here) == view_calls(cell.source), (cell.source, len(here))
        for element, _ in here:
            assert f'<div class="attnviz-nb" id="{element}" data-drawn="0"' in html  # the element the script draws
        found += here
    return found


def script_copies(text: str) -> int:
    """How many copies of the viewer's script ``text`` holds: its first statement, the guard that makes a second
    copy only drain the queue (each copy has it once; counted by that line, not the whole text, so that an edit of
    viewer.js between the kernel's run and this count changes nothing)."""
    (guard,) = (line for line in viewer_script().splitlines() if line.startswith("if (window.attnvizNotebook)"))
    return text.count(guard)


def opened_offline(page, path: Path, n_views: int, timeout_ms: int = 90_000) -> list[str]:
    """Open the page ``path`` as file:// with every request but the file itself refused, as a saved notebook opens
    with no network; wait until its ``n_views`` views are drawn (``data-drawn="1"``). Returns the requests refused,
    and any console error, in order (the list grows while the page stays open)."""
    url = path.as_uri()
    refused: list[str] = []

    def route(request_route) -> None:
        if request_route.request.url == url:
            request_route.continue_()
        else:
            refused.append(request_route.request.url)
            request_route.abort()

    page.route("**/*", route)
    page.on(
        "console",  # a refused request logs "Failed to load resource": counted above already
        lambda m: (
            m.type == "error" and not m.text.startswith("Failed to load") and refused.append(f"console: {m.text}")
        ),
    )
    page.goto(url)
    page.wait_for_function(
        "n => document.querySelectorAll('.attnviz-nb').length === n"
        " && [...document.querySelectorAll('.attnviz-nb')].every(e => e.dataset.drawn === '1')",
        arg=n_views,
        timeout=timeout_ms,
    )
    return refused


def _spaced(text: str) -> str:
    return " ".join(text.split())


def hover_large_maps(page, shown: list[tuple[str, dict]]) -> int:
    """Hover a cell (a middle query, the first key) of each view's large map; each tooltip says what that cell
    holds, in the view's words (an AssertionError says which differs): one query token, one key token and a weight
    for a map of one token a cell; for a pooled map the ranges of tokens the cell holds, their first and last, and
    their largest weight. ``shown``: the page's views (:func:`views`). Returns how many maps were hovered."""
    payloads = dict(shown)
    hovered = 0
    for element in page.locator(".attnviz-nb").all():
        canvas = element.locator("canvas.map")
        if not canvas.count():
            continue
        canvas.scroll_into_view_if_needed()
        geometry = json.loads(canvas.get_attribute("data-cells"))
        box = canvas.bounding_box()
        r = (geometry["rows"][0] + geometry["rows"][1]) // 2
        c = geometry["cols"][0]  # the first key: visible to every query, causal or not
        x = box["x"] + geometry["left"] + (c - geometry["cols"][0] + 0.5) * geometry["cell"]
        y = box["y"] + geometry["top"] + (r - geometry["rows"][0] + 0.5) * geometry["cell"]
        page.mouse.move(x, y)
        tip = element.locator(".map-tip")
        tip.wait_for(state="visible", timeout=10_000)
        payload = payloads[element.get_attribute("id")]
        words, kind = payload["words"], payload["kinds"][payload["kind"]]
        queries, keys, maps = kind["queries"], kind["keys"], kind["maps"]
        said = [_spaced(line) for line in tip.inner_text().split("\n")]  # as drawn: runs of spaces collapse
        if maps["bin_q"] == maps["bin_k"] == 1:
            named = [f"{words['query']}: {queries[r]}", f"{words['key']}: {keys[c]}"]
            weight_line = f"{words['weight']}:"
            said_named, said_weight = said[:2], said[2]
        else:
            qa, qb = r * maps["bin_q"], min(len(queries), (r + 1) * maps["bin_q"]) - 1
            ka, kb = c * maps["bin_k"], min(len(keys), (c + 1) * maps["bin_k"]) - 1
            named = [f"{queries[qa]} … {queries[qb]}", f"{keys[ka]} … {keys[kb]}"]
            weight_line = f"{words['queries']} {qa}–{qb} × {words['keys']} {ka}–{kb}: {words['max_over']}"
            said_weight, said_named = said[0], said[1:]
        assert said_named == [_spaced(line) for line in named], (said, named)
        before, weight = said_weight.rsplit(" ", 1)
        assert before == _spaced(weight_line) and 0 <= float(weight) <= 1, (said, weight_line)
        hovered += 1
    return hovered


def sizes(run: Run) -> str:
    """The notebook's size saved with its outputs, and its page's, in kB (for the report)."""
    saved = run.workdir / f"{run.name}.ipynb"
    nbformat.write(run.notebook, saved)
    return f"{run.name}: notebook {saved.stat().st_size / 1024:.0f} kB, page {run.page().stat().st_size / 1024:.0f} kB"


def screenshot(page, name: str) -> Path:
    """The page as drawn, kept in ``SHOTS`` (the first screen: the first views)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=path)
    return path

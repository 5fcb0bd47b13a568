"""The notebook viewer's script and style, as text to embed in an output cell (:mod:`attnviz.notebook.html`).

One classic script, no module and no request: a notebook saved as HTML must draw its charts where there is no
network and no server to load a module from. The layer x head grid is drawn by exactly the app's code
(``attnviz/app/components/head_grid.js``, a Streamlit component's module): its ``export default`` becomes a local
function, ``drawGrid``, that ``viewer.js`` calls with what Streamlit would give it (``parentElement``, ``data``,
``setTriggerValue``). Both are wrapped in one function, so their names stay out of the page; only
``window.attnvizNotebook`` (and the queue of outputs waiting for it) is shared. A second copy of the script in the
same page (two outputs saved alone, then shown together) finds the first and only drains the queue.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_COMPONENTS = _HERE.parent / "app" / "components"  # the app's grid (package data of attnviz.app)
_GRID_EXPORT = "export default function (component)"
_SCOPE = ".attnviz-nb"


def _full_line_comments_out(code: str) -> str:
    """``code`` without its whole-line ``//`` comments and indentation: a third smaller, and every statement kept
    (neither script has a multi-line string, so a line that starts with ``//`` is a comment)."""
    lines = (line.strip() for line in code.splitlines())
    return "\n".join(line for line in lines if line and not line.startswith("//"))


@functools.cache
def viewer_script() -> str:
    """The viewer: head_grid.js's code and viewer.js in one IIFE that defines ``window.attnvizNotebook`` (``mount``,
    ``drain``) and draws every output queued in ``window.__attnvizQueue``. Safe inside ``<script>``: it holds no
    ``</script`` and no ``<!--``."""
    grid = (_COMPONENTS / "head_grid.js").read_text(encoding="utf-8")
    if grid.count(_GRID_EXPORT) != 1:
        raise RuntimeError(f"head_grid.js no longer has one {_GRID_EXPORT!r}: the notebook viewer cannot reuse it")
    grid = grid.replace(_GRID_EXPORT, "function drawGrid(component)")
    viewer = (_HERE / "viewer.js").read_text(encoding="utf-8")
    body = _full_line_comments_out(f"{grid}\n{viewer}")
    script = (
        "(function () {\n"
        '"use strict";\n'  # head_grid.js is a module's code: strict, as it was written for
        "if (window.attnvizNotebook) { window.attnvizNotebook.drain(); return; }\n"
        f"{body}\n"
        "})();\n"
    )
    lowered = script.lower()
    if "</script" in lowered or "<!--" in lowered:
        raise RuntimeError("the notebook viewer's script would end its <script> element early")
    return script


def _scoped(css: str) -> str:
    """Every selector of ``css`` (plain rules, no @-rules) under ``.attnviz-nb``; comments out."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.DOTALL)

    def scope(match: re.Match) -> str:
        selectors = [s.strip() for s in match.group(1).split(",")]
        return "\n" + ", ".join(s if s.startswith(_SCOPE) else f"{_SCOPE} {s}" for s in selectors) + " {"

    if "@" in css:
        raise RuntimeError("the notebook viewer's style scopes plain rules only: no @-rules")
    return re.sub(r"([^{}]+?)\s*\{", scope, css).strip() + "\n"


@functools.cache
def viewer_css() -> str:
    """The viewer's style: head_grid.css (the grid's tips and focus box) and viewer.css, every rule under
    ``.attnviz-nb`` so that nothing reaches the notebook's own page."""
    grid = (_COMPONENTS / "head_grid.css").read_text(encoding="utf-8")
    viewer = (_HERE / "viewer.css").read_text(encoding="utf-8")
    css = _scoped(f"{grid}\n{viewer}")
    if "</style" in css.lower():
        raise RuntimeError("the notebook viewer's style would end its <style> element early")
    return css

"""The notebook viewer's script and style (attnviz.notebook.assets): one classic script that a notebook saved as HTML
runs anywhere (no module, no request, nothing that ends its <script> early), drawing the grid with exactly the
app's code, and a style that reaches nothing outside the view."""

import re
import tomllib
from pathlib import Path

import pytest

from attnviz.notebook import assets

ROOT = Path(__file__).resolve().parents[3]
GRID_JS = ROOT / "attnviz" / "app" / "components" / "head_grid.js"
MAX_SCRIPT_BYTES = 32_000  # what every saved view carries once (head_grid.js is 9.6 kB of it)
MAX_CSS_BYTES = 6_000


def code_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("//")]


def test_one_classic_script_that_defines_the_viewer_once():
    script = assets.viewer_script()
    assert script.startswith("(function () {\n") and script.rstrip().endswith("})();")
    assert "window.attnvizNotebook = { mount, drain };" in script
    # a second copy on the page finds the first and only drains the queue
    assert "if (window.attnvizNotebook) { window.attnvizNotebook.drain(); return; }" in script
    assert script.index("window.attnvizNotebook.drain(); return;") < script.index("function drawGrid(component)")
    assert assets.viewer_script() is script  # built once
    assert len(script.encode("utf-8")) < MAX_SCRIPT_BYTES


def test_the_grid_is_drawn_by_the_apps_own_code():
    script = assets.viewer_script()
    grid = GRID_JS.read_text(encoding="utf-8").replace(
        "export default function (component)", "function drawGrid(component)"
    )
    missing = [line for line in code_lines(grid) if line not in script]
    assert missing == []
    assert script.count("function drawGrid(component)") == 1
    assert "drawGrid({ parentElement: gridPane, data: grid, setTriggerValue });" in script


def test_nothing_is_imported_fetched_or_evaluated():
    script = assets.viewer_script()
    assert not re.search(r"^\s*(import|export)\b", script, re.MULTILINE)
    assert not re.search(r"\bimport\s*\(", script)
    assert not re.search(r"https?://", script)
    for word in ("fetch(", "XMLHttpRequest", "WebSocket", "eval(", "new Function", "innerHTML", "document.write"):
        assert word not in script, word


def test_the_script_cannot_end_its_element_early():
    lowered = assets.viewer_script().lower()
    assert "</script" not in lowered and "<!--" not in lowered


def test_every_rule_is_scoped_to_the_view():
    css = assets.viewer_css()
    assert "@" not in css and "/*" not in css
    selectors = [s.strip() for block in re.findall(r"([^{}]+)\{", css) for s in block.split(",")]
    assert len(selectors) > 20
    assert [s for s in selectors if not s.startswith(".attnviz-nb")] == []
    # the grid's own rules come with it, scoped
    assert ".attnviz-nb .attnviz-grid .tip {" in css and ".attnviz-nb .attnviz-grid .focus {" in css
    assert len(css.encode("utf-8")) < MAX_CSS_BYTES and "</style" not in css.lower()


def test_a_grid_without_its_export_is_refused(tmp_path, monkeypatch):
    (tmp_path / "head_grid.js").write_text("function draw() {}\n", encoding="utf-8")
    monkeypatch.setattr(assets, "_COMPONENTS", tmp_path)
    assets.viewer_script.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="no longer has one"):
            assets.viewer_script()
    finally:
        assets.viewer_script.cache_clear()


def test_the_viewer_is_package_data():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    data = config["tool"]["setuptools"]["package-data"]["attnviz.notebook"]
    assert sorted(data) == ["viewer.css", "viewer.js"]
    assert all((ROOT / "attnviz" / "notebook" / name).is_file() for name in data)


def viewer_words() -> set[str]:
    """The keys of viewer.js's English WORDS (what it draws where the payload's words lack one)."""
    text = (ROOT / "attnviz" / "notebook" / "viewer.js").read_text(encoding="utf-8")
    block = re.search(r"^const WORDS = \{\n(.*?)^\};", text, re.MULTILINE | re.DOTALL)
    assert block, "viewer.js has no WORDS object"
    return set(re.findall(r"^\s+(\w+):", block.group(1), re.MULTILINE))


def test_every_word_the_payload_sends_is_one_the_viewer_draws():
    from attnviz.notebook.payload import WORDS

    assert viewer_words() == set(WORDS)


def test_the_viewers_colour_scales_are_the_payloads():
    """The toggle flips between the payload's two gammas, and finds each kind's grid by its key ("1.0", "0.5")."""
    from attnviz.notebook.payload import GAMMAS

    script = assets.viewer_script()
    assert GAMMAS == (1.0, 0.5)
    assert "state.gamma = Number(payload.gamma) === 0.5 ? 0.5 : 1;" in script
    assert "Object.entries(kind.grids ?? {}).find(([key]) => Number(key) === gamma)" in script
    # the grid's own quantisation (attnviz.figures.heads.quantize_weights, capped at 254 as quantize_grid)
    assert "Math.min(254, Math.max(0, Math.round(255 * Math.pow(weight, gamma))))" in script

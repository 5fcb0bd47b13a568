"""The example notebooks in docs/notebooks/, run as a reader runs them and saved as a reader saves them.

``python -m tools.notebooks OUT [NAME ...]`` executes each notebook (or those named) top to bottom on a fresh kernel of this Python (nbclient,
ipykernel), in a temporary folder as its working directory, and writes into OUT the executed notebook
(``NAME.ipynb``) and the page nbconvert makes of it (``NAME.html``), with their sizes. ``--strip`` empties the
outputs of the notebooks in docs/notebooks/ in place, for an author who saved one after running it.

The notebooks are kept in git without their outputs. A reader on GitHub would not see the views anyway: its
notebook viewer runs no script, so each view would show only its fallback line, and a 2,000-token view is about a
megabyte of HTML that every later change would rewrite. Run them (Jupyter, VS Code, Colab, or this command) to see
them; the suite executes them fresh in the same way (tests/integration/notebook/test_notebooks.py).

The page is nbconvert's ``lab`` template, as Jupyter's File > Save and Export Notebook As > HTML writes it, less
the two scripts that template itself asks a CDN for (require.js, for widgets, and MathJax, for LaTeX): these
notebooks use neither, and without them the page makes no request at all. The template's default page carries
them: opened offline, its attnviz views draw all the same (the two requests fail; the suite checks that too).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "docs" / "notebooks"
KERNEL = "python3"  # ipykernel's own kernel: jupyter_client starts it with this Python (sys.executable)
OFFLINE_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
"""


def notebooks() -> list[Path]:
    """The example notebooks, by name."""
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def execute(path: Path, workdir: Path, timeout: float = 600.0):
    """``path`` executed top to bottom on a new kernel whose working directory is ``workdir`` (what a cell saves
    lands there): the executed notebook (an ``nbformat.NotebookNode``). A cell that raises stops the run with
    nbclient's ``CellExecutionError`` (the cell and its traceback); ``timeout`` bounds each cell, in seconds."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, timeout=timeout, kernel_name=KERNEL, resources={"metadata": {"path": str(workdir)}}
    )
    client.execute()
    return notebook


def to_html(notebook, offline: bool = True) -> str:
    """The page nbconvert's ``lab`` template makes of an executed notebook; ``offline``: without the template's
    two CDN scripts (the module's docstring says why)."""
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    if not offline:
        return HTMLExporter(template_name="lab").from_notebook_node(notebook)[0]
    loader = DictLoader({"attnviz_offline.html.j2": OFFLINE_TEMPLATE})
    exporter = HTMLExporter(template_name="lab", extra_loaders=[loader], template_file="attnviz_offline.html.j2")
    return exporter.from_notebook_node(notebook)[0]


def strip(path: Path) -> bool:
    """Empty a notebook's outputs and execution counts in place; whether it had any."""
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    had = False
    for cell in notebook.cells:
        if cell.cell_type == "code":
            had = had or bool(cell.outputs) or cell.execution_count is not None
            cell.outputs, cell.execution_count = [], None
            cell.metadata.pop("execution", None)
    if had:
        nbformat.write(notebook, path)
    return had


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.notebooks", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, help="folder for the executed notebooks and their pages")
    parser.add_argument("names", nargs="*", help="only these notebooks (their names without .ipynb); all by default")
    parser.add_argument("--strip", action="store_true", help="empty the outputs of docs/notebooks/*.ipynb in place")
    args = parser.parse_args(argv)
    if args.strip:
        for path in notebooks():
            print(f"{path.relative_to(ROOT)}: {'stripped' if strip(path) else 'no outputs'}")
        return 0
    if args.out is None:
        parser.error("give a folder to write into (or --strip)")
    import nbformat
    from nbclient.exceptions import CellExecutionError

    failed: list[str] = []
    args.out.mkdir(parents=True, exist_ok=True)
    chosen = [path for path in notebooks() if not args.names or path.stem in args.names]
    if args.names and len(chosen) != len(set(args.names)):
        parser.error(f"no such notebook among {[path.stem for path in notebooks()]}")
    for path in chosen:
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="attnviz-notebook-") as workdir:
            try:
                executed = execute(path, Path(workdir))
            except CellExecutionError as err:  # the others still run; the traceback's last line says what
                failed.append(path.stem)
                print(f"{path.stem}: failed: {str(err).strip().splitlines()[-1]}")
                continue
        seconds = time.perf_counter() - start
        nbformat.write(executed, args.out / path.name)
        page = args.out / f"{path.stem}.html"
        page.write_text(to_html(executed), encoding="utf-8")
        size = (args.out / path.name).stat().st_size
        print(
            f"{path.stem}: ran in {seconds:.0f} s; notebook {size / 1024:.0f} kB, page {page.stat().st_size / 1024:.0f} kB"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

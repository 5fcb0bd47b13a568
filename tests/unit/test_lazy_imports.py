"""What a test run imports before its first test (issue 39): under pytest-xdist every worker collects every test
module, so an import at the top of tests/conftest.py is paid by every process, and by a run of one module that
needs none of it (Streamlit: half a second; torch or transformers: seconds)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
HEAVY = ("streamlit", "torch", "transformers", "pandas", "plotly")


def test_the_shared_conftest_imports_no_heavy_package():
    check = f"import sys, tests.conftest\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", check], cwd=TESTS.parent, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "", done.stdout


def test_every_module_that_drives_the_app_imports_apptest_at_its_top():
    """tests/conftest.py's ``_navigation_v2`` patches Streamlit only once a module has imported AppTest: a module
    that imported it inside a test would run that test without the patch."""
    using = []
    for path in sorted(TESTS.rglob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        if re.search(r"\bAppTest[.(]", text):
            using.append(path)
            assert re.search(r"^from streamlit\.testing\.v1 import AppTest$", text, re.M), path.relative_to(TESTS)
    assert len(using) >= 10, using  # the search found the app's tests (tests/unit/app, integration/pages)


@pytest.mark.slow  # a fresh interpreter importing torch and pandas: 3 s
def test_ray_is_imported_only_when_a_corpus_runs_on_it():
    """Ray is an optional extra (issue 41): the CLI, the corpus run and its Ray executor's module import without
    it, so a machine without it runs every command but ``corpus --ray`` (pyproject's import-linter contract says
    which module may import it; this says that even that one waits until it is used)."""
    modules = ["attnviz.cli", "attnviz.cli.corpus", "attnviz.labs.corpus.run", "attnviz.labs.corpus.ray_run"]
    check = f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\nprint('ray' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", check], cwd=TESTS.parent, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "False", done.stdout

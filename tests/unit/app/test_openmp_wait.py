"""The app's OpenMP threads sleep while they wait (issue 37): on a busy 2-core machine torch's default spinning made
SmolLM2's pass about 10x slower (a Mask lab change 6-10 s against 2-3 s). The policy is read once, when torch
loads OpenMP, so every way in sets it before anything imports torch: app.py, serve.py, and a page file, which a
fresh server runs first for a visit straight to its URL (Streamlit's legacy multipage mode)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# records the policy at the moment torch is first imported, then runs the entry point (app.py may stop early
# outside a server: what counts is what torch saw)
PROBE = """
import importlib.abc, os, runpy, sys
seen = []
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not seen:
            seen.append(os.environ.get("OMP_WAIT_POLICY"))
        return None
sys.meta_path.insert(0, Watch())
try:
    runpy.run_path(sys.argv[1], run_name="__attnviz_probe__")
except BaseException:
    pass
import torch  # noqa: F401 (an entry point that did not import it: the policy is set by now)
print(seen[0])
"""


@pytest.mark.slow  # a fresh interpreter that imports the app and torch: 2-3 s each
@pytest.mark.parametrize("entry", ["app.py", "serve.py", "pages/masks.py", "pages/cost.py"])
def test_openmp_threads_sleep_before_torch_loads(entry):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT / entry)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.strip().splitlines()[-1] == "PASSIVE", out.stderr[-2000:]

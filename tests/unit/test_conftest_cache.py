"""The test run's shared cache (tests/conftest.py) is removed only by the process that made it: a pytest that a
test starts (tests/integration/test_kernels.py's) inherits it, and removing it when that child ended took the
cache from under the parent's workers (a full run lost a once-per-run result that way)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_child_pytest_leaves_the_cache_it_inherited(tmp_path):
    inherited = tmp_path / "parent-cache"
    inherited.mkdir()
    (inherited / "kept").write_text("a worker's result")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST"))}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly"]
    child = subprocess.run(
        [*command, "tests/unit/test_settings.py", "-x"],
        cwd=ROOT,
        env={**env, "ATTNVIZ_TEST_RUN_CACHE": str(inherited)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stdout[-2000:] + child.stderr[-2000:]
    assert (inherited / "kept").read_text() == "a worker's result"

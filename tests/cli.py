"""Run ``python -m attnviz`` as another program would: a child process, its exit status, stdout and stderr."""

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def attnviz(*args, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -m attnviz ARGS`` from the repository root; arguments are turned into strings."""
    return subprocess.run(
        [sys.executable, "-m", "attnviz", *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def once_per_run(name: str, *args, timeout: int = 300) -> dict:
    """``python -m attnviz ARGS`` run once in a whole test run, whichever worker asks first; every later call (in
    this worker or another) reads what it printed: ``{"returncode", "stdout", "stderr"}``. For a command whose work
    is long and the same for every test that checks it (the default ``train-scale``: 100 s)."""
    folder = Path(os.environ["ATTNVIZ_TEST_RUN_CACHE"]) / "once-per-run"  # tests/conftest.py makes it per run
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    with open(folder / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other workers wait for the first one's result
        if not path.is_file():
            proc = attnviz(*args, timeout=timeout)
            result = {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
            path.with_suffix(".tmp").write_text(json.dumps(result))
            path.with_suffix(".tmp").replace(path)
    return json.loads(path.read_text())

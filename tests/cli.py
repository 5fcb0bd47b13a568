"""Run ``python -m attnviz`` as another program would: a child process, its exit status, stdout and stderr."""

import json
import subprocess
import sys
from pathlib import Path

from attnviz.core.files import file_lock

SUBCOMMANDS = [  # every subcommand, in --help's order
    "heads",
    "compare",
    "scaling",
    "ablate",
    "patch",
    "logits",
    "train-scale",
    "mask-doctor",
    "kv-cache",
    "bench",
    "corpus",
]

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
    from tests.conftest import TEST_CACHE  # one per run, shared by the workers

    folder = Path(TEST_CACHE) / "once-per-run"
    path = folder / f"{name}.json"
    with file_lock(folder / f"{name}.lock"):  # the other workers wait for the first one's result
        if not path.is_file():
            proc = attnviz(*args, timeout=timeout)
            result = {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
            path.with_suffix(".tmp").write_text(json.dumps(result))
            path.with_suffix(".tmp").replace(path)
    return json.loads(path.read_text())

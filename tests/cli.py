"""Run ``python -m attnviz`` as another program would: a child process, its exit status, stdout and stderr."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def attnviz(*args, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -m attnviz ARGS`` from the repository root; arguments are turned into strings."""
    return subprocess.run(
        [sys.executable, "-m", "attnviz", *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )

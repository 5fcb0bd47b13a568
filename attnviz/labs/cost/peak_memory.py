"""Peak resident memory of this process, resettable on Linux: how benchmarks measure what one call costs.

torch's CPU allocations are invisible to ``tracemalloc``, and ``ru_maxrss`` only
ever grows (in a child process it even starts at the parent's peak), so a
measurement resets the kernel's high-water mark (VmHWM) to the current RSS,
runs, and reads it back.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import attnviz

# glibc raises its mmap threshold after a large block is freed, and then serves the next
# large allocation from heap pages that are already resident: a measured peak would miss
# it. A fixed threshold keeps every large tensor in its own mapping, returned on free.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def child_env(fixed_malloc: bool = True) -> dict[str, str]:
    """The environment for a measuring child process: this project importable, glibc's threshold fixed.

    ``fixed_malloc=False`` keeps glibc's default, for measuring a whole program as
    users run it (the fixed threshold lowers its peak and slows it down).
    """
    root = str(Path(attnviz.__file__).resolve().parents[1])  # the folder that holds attnviz/
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, **(MALLOC_ENV if fixed_malloc else {}), "PYTHONPATH": path}


def status_bytes(field: str) -> int | None:
    """A ``VmRSS``/``VmHWM`` line of /proc/self/status in bytes; None off Linux."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def maxrss_bytes() -> int:
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB elsewhere
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def reset_peak_rss() -> tuple[int, bool]:
    """The RSS baseline in bytes, and whether the kernel's peak was reset to it.

    On Linux, writing 5 to /proc/self/clear_refs resets VmHWM (peak RSS) to the
    current RSS. ``ru_maxrss`` is no substitute in a child process: it starts at
    the peak of the parent that spawned it (through vfork and exec), so after
    one large run every later child would report that run's peak.
    """
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        current = status_bytes("VmRSS")
        if current is not None and status_bytes("VmHWM") is not None:
            return current, True
    except OSError:
        pass
    return maxrss_bytes(), False


def run_child(args: Sequence[str], timeout_s: float, fixed_malloc: bool = True) -> subprocess.CompletedProcess:
    """``python ARGS`` in a fresh process with :func:`child_env`, output captured; never raises on its exit status."""
    env = child_env(fixed_malloc)
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout_s, check=False
    )


def stream_child(
    args: Sequence[str], timeout_s: float, on_stderr_line: Callable[[str], None], fixed_malloc: bool = True
) -> tuple[int, str]:
    """``python ARGS`` like :func:`run_child`, calling ``on_stderr_line`` with each line of stderr as it comes
    (a progress report): its exit status and stdout. Killed after ``timeout_s`` (subprocess.TimeoutExpired)."""
    with subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(fixed_malloc),
    ) as proc:
        timer = threading.Timer(timeout_s, proc.kill)
        timer.start()
        try:
            out: list[str] = []
            reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
            reader.start()  # stdout is read beside stderr, so neither pipe fills and blocks the child
            for line in proc.stderr:
                on_stderr_line(line)
            reader.join()
            returncode = proc.wait()
        finally:
            killed = timer.finished.is_set()  # set before cancel() only when the timer fired
            timer.cancel()
        if killed:
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
        return returncode, "".join(out)

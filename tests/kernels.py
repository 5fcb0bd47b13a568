"""The numeric suites under every CPU kernel choice torch and oneDNN offer, not only this CPU's own.

torch picks its vectorised kernels by the CPU it finds (``ATEN_CPU_CAPABILITY``: default, avx2, avx512) and oneDNN,
which runs bfloat16 matmuls, by its own (``ONEDNN_MAX_CPU_ISA``); each choice rounds differently (another blocking
of the same sums), so a bound tuned on one CPU fails on the next. ``make test-kernels`` runs :data:`SUITES`, the
suites that compare with references or between routes, once per :data:`CHOICES` entry; ``make test`` runs
:data:`QUICK_SUITES` under :data:`NON_NATIVE` (tests/integration/test_kernels.py). A choice above what the CPU has
falls back to the best it has (torch says nothing), so on an AVX2-only machine the avx512 run repeats avx2's.

    python -m tests.kernels            # every choice, every numeric suite (make test-kernels)
    python -m tests.kernels default    # one choice
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHOICES: dict[str, dict[str, str]] = {
    "default": {"ATEN_CPU_CAPABILITY": "default"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512"},
    "onednn-avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2"},  # bfloat16 matmuls without avx512_bf16 or AMX
}
NON_NATIVE = {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "AVX2"}  # the furthest from any CPU's own
QUICK_SUITES = (  # the unit suites of the math, and the model suites that compare routes, dtypes and batch shapes
    "tests/unit/core",
    "tests/unit/labs",
    "tests/unit/models",
    "tests/unit/test_low_precision.py",
    "tests/integration/models/test_parity.py",
    "tests/integration/models/test_bfloat16.py",
    "tests/integration/models/test_patching.py",
    "tests/integration/models/test_sources.py",
    "tests/integration/models/test_benchmark_memory.py",
)
SUITES = (*QUICK_SUITES[:4], "tests/property/test_library.py", "tests/integration/models", "tests/integration/zoo")


_PARENT_RUN = ("PYTEST_XDIST_", "PYTEST_CURRENT_TEST")  # a worker's own variables: the child is a run of its own


def pytest_command(suites: tuple[str, ...], workers: str | None = None) -> list[str]:
    """pytest on ``suites`` (xdist with ``workers`` when given), no cache written, every skip's reason shown."""
    command = [sys.executable, "-m", "pytest", *suites, "-q", "-p", "no:cacheprovider", "-rs"]
    return [*command, "-n", workers, "--dist", "loadgroup"] if workers else [*command, "-p", "no:xdist"]


def run(env: dict[str, str], suites: tuple[str, ...], timeout_s: float, workers: str | None = None):
    """One pytest run under ``env`` (on top of this process's environment): the finished process."""
    return subprocess.run(
        pytest_command(suites, workers),
        cwd=ROOT,
        env={**{k: v for k, v in os.environ.items() if not k.startswith(_PARENT_RUN)}, **env},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def main(names: list[str]) -> int:
    unknown = [n for n in names if n not in CHOICES]
    if unknown:
        print(f"tests.kernels: unknown choice {unknown[0]!r}; choose from {', '.join(CHOICES)}", file=sys.stderr)
        return 2
    failed = []
    for name in names or list(CHOICES):
        started = time.monotonic()
        proc = run(CHOICES[name], SUITES, timeout_s=3600, workers=os.environ.get("TEST_WORKERS", "auto"))
        summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
        print(f"{name:12} {' '.join(f'{k}={v}' for k, v in CHOICES[name].items()):32} {summary}", flush=True)
        print(f"{'':12} {time.monotonic() - started:.0f} s", flush=True)
        if proc.returncode != 0:
            failed.append(name)
            print(proc.stdout[-6000:], proc.stderr[-2000:], sep="\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

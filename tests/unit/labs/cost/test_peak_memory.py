"""Peak memory, measured in a fresh process so a run's peak is its own; on Linux the kernel's own counters."""

import mmap
import sys
from pathlib import Path

import pytest

from attnviz.labs.cost import peak_memory

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")


@linux
def test_the_kernel_counts_this_process_and_its_peak_can_be_reset():
    rss = peak_memory.status_bytes("VmRSS")
    assert rss is not None and rss > 10 * 2**20 and peak_memory.status_bytes("VmHWM") >= rss
    assert peak_memory.status_bytes("NoSuchField") is None
    baseline, reset = peak_memory.reset_peak_rss()
    assert reset and baseline > 0 and peak_memory.status_bytes("VmHWM") <= baseline + 2**20  # the peak starts over
    # 64 MiB of fresh anonymous pages, every page written: the new peak sees them. (Not a bytes object:
    # malloc may hand back freed heap pages that are still resident, which raise neither RSS nor its peak.)
    size = 64 * 2**20
    with mmap.mmap(-1, size) as held:
        for offset in range(0, size, mmap.PAGESIZE):
            held[offset] = 1
        assert peak_memory.status_bytes("VmHWM") >= baseline + 60 * 2**20


def test_a_child_imports_this_project_with_a_fixed_malloc_threshold(tmp_path):
    env = peak_memory.child_env()
    root = Path(peak_memory.__file__).resolve().parents[3]
    assert str(root) in env["PYTHONPATH"].split(":") and env["MALLOC_MMAP_THRESHOLD_"] == "131072"
    proc = peak_memory.run_child(["-c", "import attnviz, sys; print(attnviz.__file__); sys.exit(3)"], 60)
    assert proc.returncode == 3 and Path(proc.stdout.strip()).resolve() == root / "attnviz" / "__init__.py"

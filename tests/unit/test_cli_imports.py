"""The parser is built without torch, transformers or pandas: ``--help``, a mistyped flag and bad input answer
in a fraction of a second instead of the several seconds those imports take (issue 26)."""

import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "pandas")


def imported_after(code: str) -> list[str]:
    """The heavy packages a fresh interpreter holds after running ``code``."""
    check = f"{code}\nimport sys\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [
        name for name in done.stdout.splitlines()[-1].split(",") if name
    ]  # the last line: what ``code`` printed is above


@pytest.mark.slow
def test_help_bad_flags_and_bad_input_import_no_torch():
    code = """
import contextlib, io
from attnviz.cli import build_parser, main

def exit_code(argv):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            return main(argv)
        except SystemExit as done:  # argparse's --help and its errors
            return done.code

build_parser()
assert exit_code(["--help"]) == 0 and exit_code(["kv-cache", "--help"]) == 0
for argv in (["heads", "", "--quiet"], ["heads", "x", "--n-layer", "0"], ["heads", "x", "--device", "tpu"],
             ["compare", "x", " "], ["scaling", "x", "--threshold", "2"], ["ablate", "", "--heads", "0.0"],
             ["ablate", "x", "--heads", "0.0", "--mode", "bogus"], ["bench", "--threads", "0"],
             ["kv-cache", "x", "--dtype", "fp7"], ["logits", "", "--quiet"], ["logits", "x", "--position", "y"], ["mask-doctor"], ["train-scale", "--bogus"]):
    assert exit_code(argv) == 2, argv
"""
    assert imported_after(code) == []


@pytest.mark.slow
def test_running_a_command_still_imports_what_it_needs():
    """The check above means something: the same interpreter does import torch once a command runs."""
    assert "torch" in imported_after("from attnviz.cli import main\nassert main(['heads', 'the cat', '--quiet']) == 0")

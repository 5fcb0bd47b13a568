"""Hypothesis profiles and the example count.

The "ci" profile (the default) is reproducible: ``derandomize=True`` draws the same inputs on every run, no
example database, no deadline (a 2-core CI machine is slow now and then). ``HYPOTHESIS_PROFILE=explore`` draws
new random inputs and ten times as many, to hunt for bugs locally. Every generated input runs under a time limit
and a memory cap (``guard.py``; the CLI's in forked children, ``forked.py``). When the whole folder ran, the session prints
how many inputs each test ran and fails if the total is under ``MIN_EXAMPLES``. Under pytest-xdist each worker
runs part of the folder and sends its counts to the process that started it, which adds them up and checks them.
"""

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.property import EXAMPLES, MIN_EXAMPLES
from tests.property.guard import guarded

SLOW_CHECKS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]
settings.register_profile(
    "ci", deadline=None, derandomize=True, database=None, print_blob=True, suppress_health_check=SLOW_CHECKS
)
settings.register_profile(
    "explore", deadline=None, max_examples=1000, print_blob=True, suppress_health_check=SLOW_CHECKS
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

HERE = Path(__file__).resolve().parent
_run = {"modules": set(), "deselected": False, "whole": False}  # "whole": a worker saw the whole folder collected


def pytest_collection_modifyitems(session, config, items):
    _run["modules"] = {Path(str(item.fspath)).name for item in items if Path(str(item.fspath)).parent == HERE}
    for item in items:  # each generated input of this folder runs with a time limit and a memory cap
        found = getattr(getattr(item, "obj", None), "hypothesis", None)
        if Path(str(item.fspath)).parent == HERE and found and not getattr(found.inner_test, "guarded", False):
            found.inner_test = guarded(found.inner_test)


def pytest_deselected(items):
    if any(Path(str(item.fspath)).parent == HERE for item in items):
        _run["deselected"] = True


def _whole_folder() -> bool:
    every = {p.name for p in HERE.glob("test_*.py")}
    return _run["whole"] or (bool(every) and _run["modules"] == every and not _run["deselected"])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """An xdist worker finished: add its counts (the workers collect, run and count; this process only adds up)."""
    sent = getattr(node, "workeroutput", {}).get("property_examples")
    if sent:
        EXAMPLES.update(sent["examples"])
        _run["whole"] = _run["whole"] or sent["whole"]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not EXAMPLES:
        return
    total = sum(EXAMPLES.values())
    terminalreporter.section("property tests: generated inputs run")
    for name, n in sorted(EXAMPLES.items()):
        terminalreporter.write_line(f"{n:6d}  {name}")
    terminalreporter.write_line(f"{total:6d}  in all (the floor for the whole folder: {MIN_EXAMPLES})")


def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workeroutput"):  # an xdist worker: its part goes to the process that adds up
        session.config.workeroutput["property_examples"] = {"examples": dict(EXAMPLES), "whole": _whole_folder()}
        return
    if _whole_folder() and EXAMPLES and sum(EXAMPLES.values()) < MIN_EXAMPLES and session.exitstatus == 0:
        session.exitstatus = 1
        print(f"\nproperty tests ran {sum(EXAMPLES.values())} generated inputs, under the floor of {MIN_EXAMPLES}")

"""How `make test` shares the suite between pytest-xdist workers: which tests run together, and in what order.

A group is the unit of work a worker takes whole: an integration module (its module-scoped fixtures, a server, a
browser, a capture, are built once), a folder of ``ONE_GROUP`` (its modules share the zoo), or a single test
anywhere else. The browser modules are groups of their own: each worker that runs one starts its own app server
(a session fixture, so its later browser modules reuse it), and no one group of them is the run's critical path. Groups are handed out longest first, by the time each took in the last full run
(``durations.json`` beside this file): with two workers, one long module started last would keep one worker busy
while the other has nothing left to do. A group the file does not know (a new module) counts one second per test.

Refresh the file from a full run's JUnit report (`make test` writes one to .pytest_cache/junit.xml)::

    python -m tests.schedule .pytest_cache/junit.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent
DURATIONS = TESTS / "durations.json"
ONE_GROUP = {  # folders whose modules share what is costly to make
    "integration/zoo",  # the zoo: built by whichever module comes first (on a cold cache), the other waits on its lock
}
UNKNOWN_S_PER_TEST = 1.0
KEPT_ABOVE_S = 5.0  # groups shorter than this are left out of the file: their order hardly matters


def group_of(nodeid: str) -> str:
    """The group of a test id ("tests/integration/cli/test_cli.py::test_x[a]" -> "integration/cli/test_cli.py")."""
    where = nodeid.split("::", 1)[0].removeprefix("tests/")
    if not where.startswith("integration/"):
        return nodeid.removeprefix("tests/")
    folder = where.rsplit("/", 1)[0]
    return folder if folder in ONE_GROUP else where


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def order(nodeids: list[str], durations: dict[str, float]) -> list[int]:
    """The positions of ``nodeids`` in the order they should be handed out: the longest group first, a group's own
    tests in their order, ties in collection order."""
    counts = Counter(group_of(n) for n in nodeids)
    first: dict[str, int] = {}
    for i, n in enumerate(nodeids):
        first.setdefault(group_of(n), i)

    def cost(group: str) -> float:
        return durations.get(group, UNKNOWN_S_PER_TEST * counts[group])

    return sorted(range(len(nodeids)), key=lambda i: (-cost(group_of(nodeids[i])), first[group_of(nodeids[i])], i))


def durations_from_junit(report: Path) -> dict[str, float]:
    """Each group's seconds (setup, call and teardown of its tests) in a JUnit report of a run."""
    seconds: Counter[str] = Counter()
    for case in ET.parse(report).iter("testcase"):
        classname, name = case.get("classname"), case.get("name")
        if not classname or not name:
            continue
        parts = classname.split(".")
        module = max(i for i, part in enumerate(parts) if part.startswith("test_"))
        nodeid = "/".join(parts[: module + 1]) + ".py::" + "::".join([*parts[module + 1 :], name])
        seconds[group_of(nodeid)] += float(case.get("time") or 0)
    return {g: round(s, 1) for g, s in sorted(seconds.items()) if s >= KEPT_ABOVE_S}


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_file():
        sys.exit("usage: python -m tests.schedule JUNIT_XML (a full run's report, e.g. .pytest_cache/junit.xml)")
    found = durations_from_junit(Path(sys.argv[1]))
    DURATIONS.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    print(f"{DURATIONS.relative_to(TESTS.parent)}: {len(found)} groups, {sum(found.values()) / 60:.1f} min")

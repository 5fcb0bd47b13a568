"""Property-based tests (hypothesis): generated text, settings, config files and uploads; the rule is no traceback.

Each test body calls :func:`ran` once per generated input, so the session can say how many it ran and
check the total (``conftest.py``).
"""

from collections import Counter

EXAMPLES: Counter[str] = Counter()  # test name -> generated inputs run this session
MIN_EXAMPLES = 2000  # the floor (issue 19) for one CI run of the whole folder


def ran(name: str) -> None:
    """Count one generated input of test ``name``."""
    EXAMPLES[name] += 1

"""Shared test set-up.

Tests run offline (HF_HUB_OFFLINE=1: nothing may come from a hub) with a fresh
XDG cache, so every run converts SmolLM2's GGUF exactly as a new user's first
start does. The bundled models are installed by `make test`; a test that needs
one fails, never skips, when it is missing.

`make test` runs the suite on pytest-xdist workers (``--dist loadgroup``). The
cache is one per run, shared by every worker: the first process to load this
file makes it and the workers, started from that process, inherit its path
(SmolLM2's conversion takes a file lock and renames into place, so two workers
never write it twice). Tests of one integration module share module-scoped
fixtures (a server, a browser, a capture), so each module is one xdist group
and runs on one worker (the browser folder, whose modules share one server, is
one group); the slow folders are handed out first (`_ORDER`).
"""

import os
import shutil
import tempfile
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
_RUN_CACHE = "ATTNVIZ_TEST_RUN_CACHE"  # set by the process that made the cache; workers inherit it
if _RUN_CACHE not in os.environ:
    os.environ[_RUN_CACHE] = tempfile.mkdtemp(prefix="attnviz-test-cache-")
TEST_CACHE = os.environ[_RUN_CACHE]
os.environ["XDG_CACHE_HOME"] = TEST_CACHE
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    # Workers share the cores: torch's pool of one thread per core in each would oversubscribe them, and its idle
    # threads spin. One thread a worker (and in the servers and commands it starts), set before torch is imported.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
from streamlit.runtime.pages_manager import PagesManager  # noqa: E402

TESTS = Path(__file__).resolve().parent
# Folders in the order their groups are handed to workers: longest first, so the many short unit tests fill the
# end of the run instead of one long module starting last.
_ORDER = [
    "integration/zoo",
    "integration/deploy",
    "integration/browser",
    "integration/pages",
    "integration/models",
    "integration/cli",
    "property",
    "unit",
]


# Folders whose modules share session-scoped fixtures (one Chromium and one app server), so they run as one group
_ONE_GROUP = {"integration/browser"}


def _rank(item) -> int:
    where = Path(str(item.fspath)).resolve().relative_to(TESTS).as_posix()
    return next((i for i, folder in enumerate(_ORDER) if where.startswith(folder + "/")), len(_ORDER))


def _group_of(nodeid: str) -> str:
    """The unit of work a worker takes whole: an integration module (its module-scoped fixtures are built once),
    a folder of _ONE_GROUP, or a single test elsewhere."""
    where = nodeid.split("::", 1)[0].removeprefix("tests/")
    folder = where.rsplit("/", 1)[0]
    if not where.startswith("integration/"):
        return nodeid
    return folder if folder in _ONE_GROUP else where


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's own groups (``xdist_group`` marks read into the test ids) do nothing under pytest 9, whose test ids
    no longer come from the attribute xdist rewrites: every module was split across the workers. The scheduler
    below groups by :func:`_group_of` instead, from the ids themselves."""
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group_of(nodeid)

    return Groups(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """Slow folders first."""
    items.sort(key=_rank)  # stable: a module's own order is kept


def pytest_sessionfinish(session, exitstatus):
    if not hasattr(session.config, "workerinput"):  # the process that made the cache removes it, after every worker
        shutil.rmtree(TEST_CACHE, ignore_errors=True)


@pytest.fixture
def tmp_path():
    """A short folder in place of pytest's, for every test: error messages show a path whole up to 80
    characters, and under pytest-xdist pytest's own (/tmp/pytest-of-root/pytest-61/popen-gw0/test_name0/)
    takes half of that before a test names its first file."""
    folder = Path(tempfile.mkdtemp(prefix="attnviz-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def smollm2():
    from attnviz.models.hf.loading import load_hf_source

    return load_hf_source("smollm2")


@pytest.fixture(scope="session")
def minilm():
    from attnviz.models.hf.loading import load_hf_source

    return load_hf_source("minilm")


@pytest.fixture(autouse=True)
def _navigation_v2(monkeypatch):
    """Make AppTest rerun app.py on every page, as the real server does.

    AppTest resets ``PagesManager.uses_pages_directory`` before each run, and
    because a ``pages/`` folder exists it becomes True, so a rerun on a
    non-main page executes that page file alone (the legacy v1 multipage mode)
    and skips app.py's sidebar. The server sets the flag once and
    ``st.navigation`` clears it on the first run, so every later run executes
    app.py. Clearing it here reproduces that.
    """
    original = PagesManager.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        PagesManager.uses_pages_directory = False

    monkeypatch.setattr(PagesManager, "__init__", init)

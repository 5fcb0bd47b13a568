"""Shared test set-up.

Tests run offline (HF_HUB_OFFLINE=1: nothing may come from a hub) with a fresh
XDG cache. The bundled models are installed by `make test`; a test that needs
one fails, never skips, when it is missing.

What is slow to build and the same every run is kept across runs in the test
cache (tests/persistent_cache.py: $ATTNVIZ_TEST_CACHE, else
~/.cache/attnviz-tests), keyed by what it is built from: the zoo, and SmolLM2's
converted GGUF, which the run's XDG cache links to when the cache has it (a
cold machine converts it on the run's first use, into the test cache). The
conversion itself still runs in every run, as a new user's first start runs it:
into a fresh folder (tests/integration/models/test_hf_models.py) and into an
empty test cache (tests/integration/test_persistent_cache.py).

`make test` runs the suite on pytest-xdist workers (``--dist loadgroup``). The
run's cache is shared by every worker: the first process to load this file
makes it and the workers, started from that process, inherit its path
(SmolLM2's conversion takes a file lock and renames into place, so two workers
never write it twice). Tests of one integration module share module-scoped
fixtures (a server, a browser, a capture), so each module is one xdist group
and runs on one worker (the zoo folder is one group); the longest groups are
handed out first (tests/schedule.py).
"""

import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
# torch.cuda.is_available() through NVML, not cudaGetDeviceCount: asking initialises no CUDA driver in this process,
# so the property tests may still fork children that use the GPU (tests/property/forked.py)
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
_RUN_CACHE = "ATTNVIZ_TEST_RUN_CACHE"  # set by the process that made the cache; workers inherit it
# whether this process made the cache: a pytest started by a test (tests/integration/test_kernels.py's) inherits
# the variable and must not remove, when it ends, the cache its parent's workers are still using
_MADE_HERE = _RUN_CACHE not in os.environ
if _MADE_HERE:
    os.environ[_RUN_CACHE] = tempfile.mkdtemp(prefix="attnviz-test-cache-")
TEST_CACHE = os.environ[_RUN_CACHE]
# the cache kept across runs (tests/persistent_cache.py), in the user's own cache folder: read before it is replaced
os.environ.setdefault(
    "ATTNVIZ_TEST_CACHE", str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attnviz-tests")
)
os.environ["XDG_CACHE_HOME"] = TEST_CACHE
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    # Workers share the cores: torch's pool of one thread per core in each would oversubscribe them, and its idle
    # threads spin. One thread a worker (and in the servers and commands it starts), set before torch is imported.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

from tests import schedule  # noqa: E402


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Groups from tests/schedule.py, handed out in the collection's order (longest first, see below). xdist's own
    groups (``xdist_group`` marks read into the test ids) do nothing under pytest 9, whose test ids no longer come
    from the attribute xdist rewrites: every module was split across the workers."""
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return schedule.group_of(nodeid)

    config.option.loadscopereorder = False  # xdist's own order (most tests first) would start a 7-minute test last
    return Groups(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """The longest groups first (their time in the last full run), each group's tests in their own order."""
    positions = schedule.order([item.nodeid for item in items], schedule.load_durations())
    items[:] = [items[i] for i in positions]
    if any(not item.nodeid.startswith("tests/unit/") for item in items):  # a run that may load SmolLM2
        from tests.persistent_cache import place_smollm2

        place_smollm2(build=False)  # converted in an earlier run: linked now, before any command converts it


def pytest_sessionfinish(session, exitstatus):
    if _MADE_HERE and not hasattr(session.config, "workerinput"):  # the process that made it, after every worker
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
def default_training() -> dict:
    """``attnviz train-scale --json`` with its defaults (three runs of 300 steps: 100 s), once a test run: the CLI's
    contract and the Training page's default run are checked on the same output."""
    from tests.cli import once_per_run

    return once_per_run("train-scale-default", "train-scale", "--json")


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2, its conversion taken from the test cache (made there on a miss: tests/persistent_cache.py)."""
    from attnviz.models.hf.loading import load_hf_source
    from tests.persistent_cache import place_smollm2

    place_smollm2(build=True)
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

    Only a test module that drives the app loads Streamlit, by importing AppTest at its top
    (tests/unit/test_lazy_imports.py checks that every one does): the others, and a run of them alone, import
    none of it (half a second a process).
    """
    if "streamlit.testing.v1" not in sys.modules:
        return
    from streamlit.runtime.pages_manager import PagesManager

    original = PagesManager.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        PagesManager.uses_pages_directory = False

    monkeypatch.setattr(PagesManager, "__init__", init)

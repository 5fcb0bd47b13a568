"""The test cache kept across runs (tests/persistent_cache.py): a miss builds, a hit reuses, a changed input misses,
an entry that is not whole is built again, two workers build an entry once, and the entries used last are kept."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from tests import persistent_cache as cache


@pytest.fixture
def builds(monkeypatch, tmp_path):
    """An empty test cache and a builder that counts its builds: it writes ``weights.bin`` (1,000 bytes)."""
    monkeypatch.setenv(cache.ENV, str(tmp_path / "cache"))
    done = []

    def build(folder):
        done.append(folder.name)
        (folder / "weights.bin").write_bytes(b"w" * 1000)
        (folder / "sub").mkdir()
        (folder / "sub" / "config.json").write_text("{}")

    build.done = done
    return build


def test_a_miss_builds_a_hit_reuses_and_a_changed_input_misses(builds, tmp_path):
    inputs = {"transformers": "5.24.0", "builder.py": "ab12"}
    assert cache.lookup("thing", inputs) is None
    entry, built = cache.cached("thing", inputs, builds)
    assert built and len(builds.done) == 1 and entry.parent == tmp_path / "cache" / "thing"
    assert (entry / "weights.bin").stat().st_size == 1000 and cache.ready(entry)
    assert json.loads((entry / cache.MARKER).read_text())["files"] == {"sub/config.json": 2, "weights.bin": 1000}
    assert cache.cached("thing", inputs, builds) == (entry, False) and len(builds.done) == 1
    assert cache.lookup("thing", inputs) == entry

    for changed in ({**inputs, "transformers": "5.25.0"}, {**inputs, "builder.py": "cd34"}):
        assert cache.lookup("thing", changed) is None
        other, built = cache.cached("thing", changed, builds)
        assert built and other != entry
    assert len(builds.done) == 3
    assert not [p for p in entry.parent.iterdir() if p.name.startswith(".building-")]  # no build left behind


def test_an_entry_without_its_marker_or_with_a_file_cut_short_is_built_again(builds):
    entry, _ = cache.cached("thing", {"v": 1}, builds)
    with open(entry / "weights.bin", "r+b") as handle:  # a file cut short (a copy that stopped, a full disk)
        handle.truncate(10)
    assert not cache.ready(entry) and cache.lookup("thing", {"v": 1}) is None
    assert cache.cached("thing", {"v": 1}, builds) == (entry, True)
    assert (entry / "weights.bin").stat().st_size == 1000
    (entry / cache.MARKER).unlink()  # a build that stopped before its marker
    assert cache.cached("thing", {"v": 1}, builds) == (entry, True) and len(builds.done) == 3
    (entry / cache.MARKER).write_text("{not json")
    assert cache.cached("thing", {"v": 1}, builds) == (entry, True) and len(builds.done) == 4


def test_a_build_that_fails_leaves_no_entry_and_the_next_call_builds(builds):
    def fails(folder):
        (folder / "weights.bin").write_bytes(b"half")
        raise RuntimeError("killed mid-build")

    with pytest.raises(RuntimeError, match="killed mid-build"):
        cache.cached("thing", {"v": 1}, fails)
    assert cache.lookup("thing", {"v": 1}) is None
    assert [p.name for p in cache.entry_dir("thing", {"v": 1}).parent.iterdir()] == [".lock"]
    entry, built = cache.cached("thing", {"v": 1}, builds)
    assert built and (entry / "weights.bin").stat().st_size == 1000


def test_two_workers_asking_at_once_build_the_entry_once(builds):
    def slow(folder):
        time.sleep(0.3)  # the other worker asks meanwhile, and waits on the lock
        builds(folder)

    got = []
    workers = [threading.Thread(target=lambda: got.append(cache.cached("thing", {"v": 1}, slow))) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(builds.done) == 1 and {entry for entry, _ in got} == {cache.entry_dir("thing", {"v": 1})}
    assert sorted(built for _, built in got) == [False, True]


def test_a_new_entry_prunes_all_but_the_entries_used_last(builds):
    a, _ = cache.cached("thing", {"v": "a"}, builds)
    b, _ = cache.cached("thing", {"v": "b"}, builds)
    now = time.time()
    os.utime(a / cache.USED, (now - 100, now - 100))
    os.utime(b / cache.USED, (now - 200, now - 200))
    assert cache.cached("thing", {"v": "a"}, builds) == (a, False)  # a used again: now the latest but one
    c, _ = cache.cached("thing", {"v": "c"}, builds)
    assert cache.KEEP == 2 and sorted(p for p in c.parent.iterdir() if not p.name.startswith(".")) == sorted([a, c])


def test_the_cache_is_the_users_not_the_runs_nor_the_checkouts(monkeypatch, tmp_path):
    from tests.conftest import TEST_CACHE  # the run's fresh XDG cache, removed when the run ends

    named = cache.root()  # tests/conftest.py named it before pointing XDG_CACHE_HOME at the run's folder
    assert os.environ[cache.ENV] == str(named)
    assert not named.is_relative_to(TEST_CACHE) and not named.is_relative_to(cache.REPO)
    monkeypatch.delenv(cache.ENV)  # outside pytest (the zoo's --report): the user's XDG cache
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.root() == tmp_path / "attnviz-tests"

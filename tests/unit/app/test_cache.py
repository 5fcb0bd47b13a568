"""The shared result cache: bounded in bytes and entries, one computation per key, no copies."""

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from attnviz.app.cache import BoundedCache


@dataclass
class Blob:
    nbytes: int


def test_returns_the_same_object_and_computes_once():
    cache = BoundedCache(max_bytes=100, max_entries=4)
    calls = []
    first = cache.get_or_compute("a", lambda: calls.append(1) or Blob(10))
    assert cache.get_or_compute("a", lambda: calls.append(1) or Blob(10)) is first
    assert calls == [1] and cache.nbytes == 10 and len(cache) == 1


def test_evicts_least_recently_used_by_bytes_and_by_count():
    cache = BoundedCache(max_bytes=100, max_entries=3)
    for key in "abc":
        cache.get_or_compute(key, lambda: Blob(40))  # a, b, c: 120 bytes > 100, so a goes
    assert "a" not in cache and "b" in cache and "c" in cache and cache.nbytes == 80
    cache.get_or_compute("b", lambda: Blob(999))  # a hit: b becomes the most recent
    cache.get_or_compute("d", lambda: Blob(10))
    cache.get_or_compute("e", lambda: Blob(10))  # four entries > 3: the oldest (c) goes
    assert "c" not in cache and all(key in cache for key in "bde") and len(cache) == 3


def test_a_value_over_the_bound_is_returned_but_not_kept():
    cache = BoundedCache(max_bytes=50, max_entries=4)
    assert cache.get_or_compute("big", lambda: Blob(60)).nbytes == 60
    assert "big" not in cache and cache.nbytes == 0


def test_errors_are_not_cached():
    cache = BoundedCache(max_bytes=50, max_entries=4)
    with pytest.raises(ValueError):
        cache.get_or_compute("x", lambda: (_ for _ in ()).throw(ValueError("bad input")))
    assert cache.get_or_compute("x", lambda: Blob(1)).nbytes == 1


def test_concurrent_requests_for_one_key_compute_it_once():
    cache = BoundedCache(max_bytes=1000, max_entries=4)
    calls = []

    def slow():
        calls.append(threading.get_ident())
        time.sleep(0.2)
        return Blob(5)

    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get_or_compute("k", slow))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and all(r is results[0] for r in results)


def test_bounds_must_make_sense():
    with pytest.raises(ValueError, match="max_entries"):
        BoundedCache(max_bytes=10, max_entries=0)


def test_a_large_computation_or_drop_hands_the_allocators_free_pages_back():
    """glibc keeps what a capture frees in its arenas: after computing, dropping or clearing a large value (or a
    computation that raised), the cache calls ``release``; a small value calls nothing."""
    released = []
    cache = BoundedCache(max_bytes=100, max_entries=8, release=lambda: released.append(1), release_above=30)
    cache.get_or_compute("small", lambda: Blob(10))
    cache.get_or_compute("small2", lambda: Blob(29))
    assert released == []  # nothing large computed or dropped
    cache.get_or_compute("large", lambda: Blob(40))
    assert len(released) == 1
    cache.get_or_compute("small3", lambda: Blob(25))  # 104 bytes: drops "small" (10), nothing large
    assert len(released) == 1 and "small" not in cache
    cache.get_or_compute("small4", lambda: Blob(20))  # 114 bytes: drops "small2" (29)
    assert len(released) == 1 and "large" in cache
    cache.get_or_compute("small5", lambda: Blob(20))  # 105 bytes: drops "large" (40)
    assert len(released) == 2 and "large" not in cache
    cache.get_or_compute("huge", lambda: Blob(500))  # over the bound: returned, not kept, released after
    assert len(released) == 3
    with pytest.raises(MemoryError):
        cache.get_or_compute("fails", lambda: (_ for _ in ()).throw(MemoryError("out of memory")))
    assert len(released) == 4
    cache.get_or_compute("last", lambda: Blob(20))
    cache.clear()  # 70 bytes dropped at once
    assert len(released) == 5 and len(cache) == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_return_free_memory_gives_a_threads_freed_arena_pages_back_to_the_system():
    """The measured cause, in miniature: a thread allocates 256 MB in blocks under the mmap threshold, frees 7 of
    every 8 (the arena keeps the holes resident), and only return_free_memory() gives them back."""
    script = """
import threading
from attnviz.app.cache import return_free_memory

def rss_mb():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS:")).split()[1]) // 1024

kept = []
def work():
    blocks = [bytearray(64 * 1024) for _ in range(4096)]  # 256 MB in a thread's arena, every page touched
    kept.extend(blocks[::8])  # one block in eight stays: the freed ones are holes no free() can trim
t = threading.Thread(target=work); t.start(); t.join()
before = rss_mb()
assert return_free_memory() is True
print(before, rss_mb())
"""
    env = {**os.environ, "MALLOC_ARENA_MAX": "", "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    before, after = map(int, out.stdout.split())
    assert before - after >= 150, (before, after)  # about 224 MB of holes handed back


@pytest.mark.slow  # 1.35 s of computations and idle time, by the clock
def test_a_long_computation_hands_free_pages_back_while_it_runs_and_an_idle_cache_does_not():
    """A capture in a server's thread peaked at about 2x its record until it ended (glibc keeps what each layer
    frees): while any computation runs, ``release`` runs every ``release_every_s``; once none runs, never."""
    released = []
    cache = BoundedCache(
        100, 4, release=lambda: released.append(time.monotonic()), release_above=10**9, release_every_s=0.1
    )
    start = time.monotonic()
    cache.get_or_compute("slow", lambda: time.sleep(0.65) or Blob(1))
    end = time.monotonic()
    assert len(released) >= 2 and all(start + 0.09 <= at <= end + 0.05 for at in released), (released, start, end)
    n_after = len(released)
    cache.get_or_compute("quick", lambda: Blob(1))  # over before the first interval: nothing released
    time.sleep(0.4)  # nothing runs
    assert len(released) == n_after
    BoundedCache(100, 4, release=lambda: released.append(0.0), release_every_s=None).get_or_compute(
        "slow", lambda: time.sleep(0.3) or Blob(1)
    )
    assert len(released) == n_after  # None: only after large values, never while computing

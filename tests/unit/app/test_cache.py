"""The shared result cache: bounded in bytes and entries, one computation per key, no copies."""

import threading
import time
from dataclasses import dataclass

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

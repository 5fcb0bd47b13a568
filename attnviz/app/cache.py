"""A thread-safe LRU cache bounded in bytes, for results shared read-only by every session of a server.

``st.cache_data`` hands each rerun a deserialised copy of what it holds (0.45 s
for a 283 MB record) and bounds only the number of entries. Records here are
built once, never mutated, and can be large, so they are shared by reference
and bounded by what they hold: a hosted server's memory stays within
``max_bytes`` (plus the one result being computed per key).

What a large computation frees (its forward's activations, the chunks it reduced) and what the cache drops goes
back to the allocator, and glibc's allocator keeps it: its arenas hold the freed pages, so every capture left
about 0.8 x its record resident for good (measured: benchmarks/soak.py), and a capture in a server's thread
peaked at about 2 x its record above the base where admission prices it at 1.45 x (SmolLM2, 2,048 / 8,192
tokens: 610-740 / 1,970-2,400 MB). So the cache hands those pages back to the system
(:func:`return_free_memory`, ``malloc_trim``; 8-170 ms): after computing or dropping anything of
:data:`RELEASE_ABOVE_BYTES` or more, and every :data:`RELEASE_EVERY_S` while a computation runs (then the same
captures peak at 515-550 / 1,480-1,500 MB, for 2-5 % more time; after every layer it was 13 %, and keeping large
blocks out of the arenas, ``M_MMAP_THRESHOLD`` 1 MB, 31 %).
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

RELEASE_ABOVE_BYTES = 16 * 2**20  # a computed or dropped value this large hands the allocator's free pages back
RELEASE_EVERY_S = 1.0  # and while a computation runs, this often


def nbytes_of(value: Any) -> int:
    """What a cached value holds: its ``nbytes`` attribute, else 0 (small values)."""
    return int(getattr(value, "nbytes", 0) or 0)


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim  # glibc; musl, macOS and Windows have none
    except (AttributeError, OSError, TypeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_MALLOC_TRIM = _malloc_trim()


def return_free_memory() -> bool:
    """Hand the C allocator's free pages back to the system (glibc's ``malloc_trim(0)``: every arena, not only the
    main heap's top); False where the C library has no such call."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


class BoundedCache:
    """``get_or_compute(key, compute)``: one computation per key at a time, LRU eviction by bytes and count.

    A value larger than ``max_bytes`` is returned but not kept. Exceptions are not cached. ``release`` runs after
    a computation that returned ``release_above`` bytes or more, or raised, after dropping that many bytes, and
    every ``release_every_s`` while any computation runs (by default :func:`return_free_memory`; None: never
    while computing), in a thread of the cache's own.
    """

    def __init__(
        self,
        max_bytes: int,
        max_entries: int,
        size: Callable[[Any], int] = nbytes_of,
        release: Callable[[], object] = return_free_memory,
        release_above: int = RELEASE_ABOVE_BYTES,
        release_every_s: float | None = RELEASE_EVERY_S,
    ) -> None:
        if max_bytes < 0 or max_entries < 1:
            raise ValueError(f"max_bytes ({max_bytes}) must be >= 0 and max_entries ({max_entries}) >= 1")
        self.max_bytes, self.max_entries, self._size = max_bytes, max_entries, size
        self._release, self.release_above, self.release_every_s = release, release_above, release_every_s
        self._busy = threading.Condition()  # guards the count of computations running and the releasing thread
        self._n_running = 0
        self._releaser: threading.Thread | None = None
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._computing: dict[Hashable, threading.Lock] = {}

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(size for _, size in self._items.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._items

    def lookup(self, key: Hashable) -> tuple[bool, Any]:
        """(True, the value) if ``key`` is held now (it becomes the most recent), else (False, None): one look."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return True, self._items[key][0]
            return False, None

    def get_or_compute(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        found, value = self.lookup(key)
        if found:
            return value
        with self._lock:
            key_lock = self._computing.setdefault(key, threading.Lock())
        with key_lock:  # a second session asking for the same result waits for the first
            found, value = self.lookup(key)
            if found:
                return value
            release = True  # a computation that raised may have freed all it built
            try:
                value = self._while_releasing(compute)
                release = self._store(key, value)
            finally:
                with self._lock:  # only this key's own lock: a newer waiter's lock stays for the others
                    if self._computing.get(key) is key_lock:
                        del self._computing[key]
                if release:
                    self._release()
        return value

    def _while_releasing(self, compute: Callable[[], Any]) -> Any:
        """``compute()``, counted among the computations running (the releasing thread works while any runs)."""
        with self._busy:
            self._n_running += 1
            if self._releaser is None and self.release_every_s:
                self._releaser = threading.Thread(target=self._release_while_running, name="attnviz-release")
                self._releaser.daemon = True
                self._releaser.start()
            self._busy.notify_all()
        try:
            return compute()
        finally:
            with self._busy:
                self._n_running -= 1

    def _release_while_running(self) -> None:
        """The releasing thread: every ``release_every_s`` that a computation has been running, ``release()``."""
        while True:
            with self._busy:
                while not self._n_running:
                    self._busy.wait()
                deadline = time.monotonic() + self.release_every_s
                while self._n_running and (left := deadline - time.monotonic()) > 0:
                    self._busy.wait(left)
                if not self._n_running:
                    continue
            self._release()

    def _store(self, key: Hashable, value: Any) -> bool:
        """Keep ``value`` (evicting the least recent past the bounds); whether it or what it evicted is large
        (``release_above``)."""
        size = self._size(value)
        if size > self.max_bytes:
            return size >= self.release_above
        dropped = []  # released outside the lock, once nothing here refers to them
        with self._lock:
            self._items[key] = (value, size)
            total = sum(s for _, s in self._items.values())
            while self._items and (total > self.max_bytes or len(self._items) > self.max_entries):
                _, item = self._items.popitem(last=False)
                dropped.append(item[1])
                total -= item[1]
        return max([size, *dropped]) >= self.release_above

    def clear(self) -> None:
        with self._lock:
            dropped = sum(size for _, size in self._items.values())
            self._items.clear()
        if dropped >= self.release_above:
            self._release()

"""Out of memory, in one line: recognising the ways torch and Python say a device ran out, and saying which device,
how much was asked and free, and what to try. Loading, the capture, the eager route, generation, ablation and the
KV measurement all end in :func:`one_line` (the CLI's ``main`` and the app's job runner), so an allocation that
fails anywhere reaches the user as :class:`~attnviz.errors.OutOfMemoryError`, and the cached blocks go back to
the device so nothing else in the server is lost."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from attnviz.errors import OutOfMemoryError
from attnviz.i18n.message import msg

_MARKERS = (
    "out of memory",
    "not enough memory",
    "can't allocate memory",
    "cannot allocate memory",
    "failed to allocate",
)
_ASKED = re.compile(r"(?:tried to allocate|allocate)\s+([\d.]+)\s*([KMGT]?i?B|bytes)", re.IGNORECASE)
_DEVICE = re.compile(r"\b(GPU|cuda:?)\s*(\d+)", re.IGNORECASE)
_UNIT_BYTES = {"bytes": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_UNIT_BYTES.update({"kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12})


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` says a device ran out of memory (torch's OutOfMemoryError on CUDA, its RuntimeError on the
    CPU and MPS allocators, Python's MemoryError)."""
    if isinstance(err, OutOfMemoryError | MemoryError):
        return True
    import torch

    if isinstance(err, torch.OutOfMemoryError):
        return True
    return isinstance(err, RuntimeError) and any(marker in str(err).lower() for marker in _MARKERS)


def asked_bytes(err: BaseException) -> int | None:
    """The size of the allocation that failed, read from torch's message; None where it says none."""
    found = _ASKED.search(str(err))
    if not found:
        return None
    return int(float(found.group(1)) * _UNIT_BYTES.get(found.group(2).lower(), 1))


def failed_device(err: BaseException, device: str | None) -> str:
    """The device the allocation failed on: the GPU torch's message names, else MPS or the CPU by the message,
    else ``device`` (the work's), else "cpu"."""
    text = str(err)
    found = _DEVICE.search(text)
    if found:
        return f"cuda:{found.group(2)}"
    if "MPS" in text:
        return "mps"
    if "CPU" in text or isinstance(err, MemoryError):
        return "cpu"
    return str(device or "cpu")


def _size(nbytes: int | None) -> str:
    if nbytes is None:
        return "an unknown amount"
    return f"{nbytes / 2**30:,.2f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:,.1f} MiB"


def one_line(err: BaseException, device: str | None = None) -> OutOfMemoryError:
    """The :class:`OutOfMemoryError` that says ``err`` in one line, after handing cached blocks back."""
    if isinstance(err, OutOfMemoryError):
        return err
    from attnviz.core.devices import device_free_bytes, free_device_memory

    where = failed_device(err, device)
    free_device_memory(where)
    try:
        free = device_free_bytes(where)
    except Exception:  # a backend that cannot say
        free = None
    return OutOfMemoryError(msg("memory.out_of_memory", device=where, asked=_size(asked_bytes(err)), free=_size(free)))


@contextmanager
def memory_errors(device: str | None = None) -> Iterator[None]:
    """Turn any out-of-memory error raised inside into :func:`one_line`'s; everything else passes unchanged."""
    try:
        yield
    except OutOfMemoryError:
        raise
    except (MemoryError, RuntimeError) as err:
        if not is_out_of_memory(err):
            raise
        raise one_line(err, device) from err

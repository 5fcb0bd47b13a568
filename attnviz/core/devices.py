"""Where a model runs and in what precision: devices, dtypes, device maps and memory caps, chosen by a user.

A user names a device ("auto", "cpu", "cuda", "cuda:1", "mps"), a dtype ("auto" or one of
:data:`DTYPE_CHOICES`), and for a model larger than one device a device map ("auto", "balanced",
"sequential"), memory caps per device (``0=20GiB,1=20GiB,cpu=64GiB``) and a folder for weights offloaded to
disk. Everything here reads and checks those choices (a ValueError in one line for a bad one) and says what a
device has; the loader hands them to transformers and accelerate. The parser reads the choices without
importing torch, so the functions that need it import it inside.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass

from attnviz.core.files import kind_of, path_error, shown_path
from attnviz.core.typed_numbers import ascii_digits
from attnviz.i18n.message import msg

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")  # plus "cuda:N", one GPU of several
DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")
DEVICE_MAP_CHOICES = ("auto", "balanced", "sequential")
LOW_PRECISION = ("bfloat16", "float16")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# the share of free host memory a model's float32 weights may take for "auto" to pick float32 on a CPU
AUTO_FLOAT32_SHARE = 0.5

_DEVICE = re.compile(r"(cpu|mps|cuda)(?::([0-9]{1,3}))?\Z")
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B|B)?\Z", re.IGNORECASE)  # [0-9]: \d also takes "٥"
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS.update({"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40})


def available_devices() -> list[str]:
    """The devices this machine can run on, best first: each GPU ("cuda:0", "cuda:1", ...), MPS, the CPU."""
    import torch  # here, not above: the CLI's parser reads DEVICE_CHOICES without importing torch

    found = [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return [*found, "cpu"]


def accelerator_count() -> int:
    """How many accelerators (GPUs, MPS) this machine has: what the server's running cap counts."""
    return len(available_devices()) - 1  # the CPU is always last


def check_device_choice(choice: str) -> str:
    """``choice`` if it names a device kind ("auto", "cpu", "cuda", "cuda:N", "mps"); ValueError otherwise.
    Whether it exists here is :func:`resolve_device`'s question."""
    found = _DEVICE.match(choice) if isinstance(choice, str) else None
    if choice == "auto" or (found and (found.group(2) is None or found.group(1) == "cuda")):
        return choice
    raise ValueError(_choice_error(choice))


def _choice_error(choice: object) -> str:
    return msg("bounds.device_choice", choices=", ".join((*DEVICE_CHOICES, "cuda:N")), choice=repr(choice))


def resolve_device(choice: str = "auto") -> str:
    """Turn a user's choice into a device that exists ("cuda" is the first GPU, "cuda:0"); ValueError if not."""
    check_device_choice(choice)
    available = available_devices()
    if choice == "auto":
        return "cuda" if available[0] == "cuda:0" else available[0]
    if choice == "cuda" and "cuda:0" in available:
        return "cuda"
    if choice not in available:
        raise ValueError(msg("bounds.device_unavailable", choice=repr(choice), available=", ".join(available)))
    return choice


def check_dtype_choice(choice: str) -> str:
    """``choice`` if it is one of :data:`DTYPE_CHOICES`; ValueError otherwise."""
    if choice not in DTYPE_CHOICES:
        raise ValueError(msg("bounds.dtype_choice", choices=", ".join(DTYPE_CHOICES), choice=repr(choice)))
    return choice


def check_device_map_choice(choice: str) -> str:
    """``choice`` if it is one of :data:`DEVICE_MAP_CHOICES`; ValueError otherwise."""
    if choice not in DEVICE_MAP_CHOICES:
        raise ValueError(msg("bounds.device_map_choice", choices=", ".join(DEVICE_MAP_CHOICES), choice=repr(choice)))
    return choice


def parse_size(text: str) -> int:
    """Bytes from "20GiB", "512MB", "1.5GiB" or a plain number of bytes; ValueError for anything else."""
    found = _SIZE.match(text.strip()) if isinstance(text, str) and len(text) <= 40 else None
    if not found:
        raise ValueError(msg("bounds.memory_size", text=repr(text)[:60]))
    number, unit = float(found.group(1)), (found.group(2) or "B").lower()
    size = int(number * _UNITS[unit])
    if size <= 0:
        raise ValueError(msg("bounds.memory_size", text=repr(text)[:60]))
    return size


def parse_max_memory(text: str) -> tuple[tuple[str, int], ...]:
    """``--max-memory`` ("0=20GiB,1=20GiB,cpu=64GiB"; "disk" is accelerate's name for the offload folder) as
    ((device, bytes), ...) in the order given, a GPU by its index; ValueError in one line for a malformed
    entry, an unknown device or one named twice."""
    if not isinstance(text, str) or not text.strip() or len(text) > 400:
        raise ValueError(msg("bounds.max_memory", text=repr(text)[:60]))
    caps: dict[str, int] = {}
    for part in text.split(","):
        name, sep, size = part.partition("=")
        name = name.strip().lower()
        if not sep or not (ascii_digits(name) or name in ("cpu", "mps", "disk")):
            raise ValueError(msg("bounds.max_memory", text=repr(part.strip())[:60]))
        name = str(int(name)) if ascii_digits(name) else name
        if name in caps:
            raise ValueError(msg("bounds.max_memory", text=repr(part.strip())[:60]))
        caps[name] = parse_size(size)
    return tuple(caps.items())


OFFLOAD_REFUSED_ROOTS = ("/proc", "/sys", "/dev")  # made up by the kernel as they are read: no folder for weights


def _not_folder_kind(kind: str | None):
    return msg("placement.offload_regular_file") if kind == "file" else msg("files.kind_other")


def check_offload_folder(folder: str) -> str:
    """``folder`` when weights can be offloaded to it: not empty, not under /proc, /sys or /dev (links followed),
    a folder that is writable, or one that can be made (its nearest existing parent a writable folder). ValueError
    in one line otherwise, naming the path (a long one shortened) and why; nothing is created here."""
    if not isinstance(folder, str) or not folder.strip():
        raise ValueError(msg("placement.offload_empty"))
    shown = shown_path(folder)
    try:
        real = os.path.realpath(os.path.expanduser(folder))
    except (OSError, ValueError, RuntimeError) as err:
        raise path_error(folder, err) from err
    root = next((r for r in OFFLOAD_REFUSED_ROOTS if real == r or real.startswith(r + "/")), None)
    if root is not None:
        raise ValueError(msg("placement.offload_pseudo", path=shown, root=root))
    kind, nearest = kind_of(real), real  # PathError (a ValueError, one line) for a name too long, a loop, ...
    if kind not in (None, "directory"):
        raise ValueError(msg("placement.offload_not_folder", path=shown, kind=_not_folder_kind(kind)))
    while kind is None and os.path.dirname(nearest) != nearest:  # to be made: its nearest existing parent must do
        nearest = os.path.dirname(nearest)
        kind = kind_of(nearest)
    if kind != "directory":
        raise ValueError(
            msg("placement.offload_no_parent", path=shown, folder=shown_path(nearest), kind=_not_folder_kind(kind))
        )
    if not os.access(nearest, os.W_OK | os.X_OK):
        raise ValueError(msg("placement.offload_not_writable", path=shown, folder=shown_path(nearest)))
    return folder


def check_max_memory_devices(caps: tuple[tuple[str, int], ...]) -> None:
    """ValueError in one line when the caps name a GPU (by index) or MPS that this machine lacks: said before
    accelerate is asked, which would print lines of its own first."""
    present = available_devices()
    for name, _ in caps:
        device = "mps" if name == "mps" else f"cuda:{name}" if ascii_digits(name) else None
        if device is not None and device not in present:
            raise ValueError(msg("placement.max_memory_device", device=device, available=", ".join(present)))


def accelerate_max_memory(caps: tuple[tuple[str, int], ...]) -> dict[int | str, int]:
    """The caps as accelerate's ``max_memory`` wants them: GPUs keyed by int."""
    return {int(name) if ascii_digits(name) else name: size for name, size in caps}


@dataclass(frozen=True)
class Placement:
    """How a model is loaded: its dtype choice, and (for a model larger than one device) a device map with its
    memory caps and offload folder. Hashable: a part of the spec caches key on."""

    dtype: str = "auto"
    device_map: str | None = None
    max_memory: tuple[tuple[str, int], ...] = ()
    offload_folder: str | None = None

    def __post_init__(self) -> None:
        check_dtype_choice(self.dtype)
        if self.offload_folder is not None:
            check_offload_folder(self.offload_folder)
        if self.device_map is not None:
            check_device_map_choice(self.device_map)
            check_max_memory_devices(self.max_memory)
        elif self.max_memory or self.offload_folder:
            raise ValueError(msg("bounds.needs_device_map"))


def torch_dtype(name: str):
    """The torch dtype called ``name`` ("float32", "bfloat16", "float16")."""
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def dtype_name(dtype) -> str:
    """ "bfloat16" for torch.bfloat16 (the inverse of :func:`torch_dtype`)."""
    return str(dtype).removeprefix("torch.")


def resolve_dtype(choice: str, device: str, stored: str | None, float32_bytes: int | None = None) -> str:
    """The dtype a model runs in: ``choice`` unless "auto". "auto" takes the checkpoint's own dtype (``stored``,
    float32 when it says none) on an accelerator; on a CPU, float32 (the fastest there, whose matmuls are native)
    when the float32 weights (``float32_bytes``) take at most :data:`AUTO_FLOAT32_SHARE` of the free host memory,
    else the checkpoint's dtype."""
    check_dtype_choice(choice)
    if choice != "auto":
        return choice
    stored = stored if stored in DTYPE_BYTES else "float32"
    if not device.startswith("cpu"):
        return stored
    if float32_bytes is None or float32_bytes <= AUTO_FLOAT32_SHARE * host_free_bytes():
        return "float32"
    return stored


def host_free_bytes() -> int:
    """Host memory free for this process: the smaller of what the machine has available and the cgroup's room."""
    import psutil

    from attnviz.core.admission import read_cgroup_limit

    free = psutil.virtual_memory().available
    limit = read_cgroup_limit()
    if limit:
        free = min(free, max(0, limit - psutil.Process().memory_info().rss))
    return int(free)


def device_free_bytes(device: str) -> int | None:
    """Free memory on ``device`` ("cuda:N", "cuda", "mps", "cpu") in bytes; None where the backend cannot say."""
    import torch

    kind = device.split(":")[0]
    if kind == "cuda" and torch.cuda.is_available():
        index = int(device.split(":")[1]) if ":" in device else torch.cuda.current_device()
        free, _total = torch.cuda.mem_get_info(index)
        return int(free)
    if kind == "mps":
        recommended = getattr(torch.mps, "recommended_max_memory", None)
        if recommended is None:
            return None
        return max(0, int(recommended()) - int(torch.mps.driver_allocated_memory()))
    if kind == "cpu":
        return host_free_bytes()
    return None


def free_device_memory(device: str | None = None) -> None:
    """Hand the allocator's cached blocks back to the device after a model or a large result was dropped, or after
    an allocation failed on it (``device``: "cuda:N", "mps", "cpu" or None for whichever is in use)."""
    import gc

    import torch

    gc.collect()
    if str(device or "").startswith("cuda") or (torch.cuda.is_available() and torch.cuda.is_initialized()):
        with contextlib.suppress(RuntimeError):  # a context an error left unusable: the error said is the first one
            torch.cuda.empty_cache()  # a no-op before CUDA starts, and so on a CPU-only build
    mps = getattr(torch, "mps", None)
    if mps is not None and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        mps.empty_cache()


def synchronize(device) -> None:
    """Wait for the work queued on ``device`` (a CUDA or MPS stream runs ahead of Python): before a clock is read."""
    import torch

    kind = torch.device(device).type
    if kind == "cuda":
        torch.cuda.synchronize(device)
    elif kind == "mps":
        torch.mps.synchronize()

"""A fake ``cuda`` device on a machine without a GPU: device-mismatch and host-sync checks, no accelerator needed.

Inside :class:`FakeCuda`, any torch call that touches a ``cuda`` tensor, or asks for one (``device="cuda"``,
``.to("cuda")``), runs under torch's :class:`~torch._subclasses.fake_tensor.FakeTensorMode`: shapes, dtypes and
devices are computed as a real GPU would, no data is. Every other call (the host-side work on plain CPU tensors,
such as reading a :class:`~attnviz.core.masks.KeyRanges`) runs for real, as it would beside a GPU. So:

- a CPU tensor mixed with a ``cuda`` one in an op fails as on a GPU (a ``RuntimeError`` naming both devices), the
  bug of a tensor made with no ``device=`` and meant to meet the model's (a CPU scalar, or a CPU value copied
  into a device tensor, passes, as on a GPU);
- reading a ``cuda`` tensor's value on the host (``bool``, ``int``, ``float``, ``.item()``, ``.tolist()``,
  ``.numpy()``, ``torch.equal``), which on a GPU waits for all the work queued before it, raises
  :class:`HostSyncError` naming the call;
- copies from ``cuda`` to the host (``.cpu()``, ``.to("cpu")``, ``host[i] = device``) are counted in
  :attr:`FakeCuda.transfers`, so a test can check that only reduced results cross, once per layer, whatever the
  number of chunks;
- with ``float64=False``, a device as MPS is (it has no float64): any call that makes a float64 tensor on the
  device raises :class:`Float64Error` naming the call.

A fake tensor has no values: what a function returns can be checked for shapes, dtypes and devices only, and a
value copied to the host reads as zeros (a mask read back is "no leak", a flag False), so the host's work on it
goes on without being what is checked.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

DEVICE = torch.device("cuda", 0)  # what a fake tensor reports; a CPU-only torch build accepts it in fake mode
NO_GUARD = "not linked with support for cuda devices"  # a CPU-only build, asked for a cuda device guard
HOST_READS = frozenset(
    {"__bool__", "__int__", "__float__", "__index__", "__complex__", "item", "tolist", "numpy", "equal", "allclose"}
)


class HostSyncError(RuntimeError):
    """A device tensor's value was read on the host: on a GPU, a wait for every kernel queued before it."""


class Float64Error(TypeError):
    """A float64 tensor made on a device that has none (MPS: "Cannot convert a MPS Tensor to float64 dtype")."""


def _on_device(value: object) -> bool:
    if isinstance(value, FakeTensor):
        return value.device.type != "cpu"
    if isinstance(value, torch.device):
        return value.type != "cpu" and value.type != "meta"
    return isinstance(value, str) and value.split(":")[0] == "cuda"


class FakeCuda(TorchFunctionMode):
    """The mode described in the module docstring: ``with FakeCuda() as fake: q = q.to("cuda")``, then
    ``fake.transfers``. Real CPU tensors become fake ``cuda`` ones by ``.to("cuda")`` (their values are lost).
    Autograd on fake ``cuda`` tensors aborts a CPU-only build: run what needs no gradient under ``torch.no_grad()``."""

    def __init__(self, float64: bool = True) -> None:
        super().__init__()
        self.fake = FakeTensorMode(allow_non_fake_inputs=True)
        self.transfers: list[str] = []  # names of the calls that copied a device tensor to the host
        self.float64 = float64  # False: the device has no float64, as MPS

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat, _ = tree_flatten((args, kwargs))
        device_tensors = [a for a in flat if isinstance(a, FakeTensor) and a.device.type != "cpu"]
        name = getattr(func, "__name__", str(func))
        if device_tensors and name in HOST_READS:
            shape = tuple(device_tensors[0].shape)
            raise HostSyncError(f"{name}() read a {device_tensors[0].device} tensor of shape {shape} on the host")
        if name in HOST_READS and isinstance(args[0], FakeTensor):  # a value copied to the host: it reads as zeros
            return func(torch.zeros(args[0].shape, dtype=args[0].dtype), *args[1:], **kwargs)
        if not any(isinstance(a, FakeTensor) or _on_device(a) for a in flat):
            return func(*args, **kwargs)  # host work on plain CPU tensors: real values, as beside a GPU
        args, kwargs = tree_map(_indexed, (args, kwargs))
        try:
            with self.fake:
                out = func(*args, **kwargs)
        except RuntimeError as err:
            if NO_GUARD not in str(err):
                raise
            out = self._on_twins(func, args, kwargs)
        if device_tensors and (_all_on_host(out) or _written_on_host(name, args)):
            self.transfers.append(name)
        if not self.float64 and any(_on_device(t) and t.dtype == torch.float64 for t in _fakes(out)):
            raise Float64Error(f"{name}() made a float64 tensor on a device that has no float64 (MPS)")
        return out

    def _on_twins(self, func, args: tuple, kwargs: dict):
        """``func`` run on ``meta`` twins of the fake ``cuda`` tensors, its results made fake ``cuda`` tensors again.

        Some Python bindings (indexing, ``~x``, ``x & y``) take a device guard before they dispatch, which a
        CPU-only build has for no ``cuda`` device. A ``meta`` twin of the same shape, strides and dtype shapes the
        result (fake tensors have no data to share), and checks devices as a GPU would: a CPU tensor beside it
        fails, a CPU scalar or a CPU value copied into it does not. Indexing by a bool tensor, whose result's shape
        depends on its values, fails on the twin, as it waits for the device on a GPU.
        """
        originals: dict[int, Tensor] = {}  # id of a twin -> the fake tensor it stands for

        def twin(x: object) -> object:
            if isinstance(x, FakeTensor) and x.device.type != "cpu":
                t = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
                originals[id(t)] = x
                return t
            return x

        out = func(*tree_map(twin, args), **tree_map(twin, kwargs))

        def back(x: object) -> object:
            if not isinstance(x, Tensor) or x.device.type != "meta":
                return x
            if id(x) in originals:  # an in-place op returns its input
                return originals[id(x)]
            with self.fake:
                return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=DEVICE)

        return tree_map(back, out)


def _indexed(x: object) -> object:
    """``"cuda"`` as ``cuda:0``: fake mode would ask a CPU-only build for the current GPU's index."""
    if (isinstance(x, str) and x == "cuda") or (isinstance(x, torch.device) and x.type == "cuda" and x.index is None):
        return DEVICE
    return x


def _written_on_host(name: str, args: tuple) -> bool:
    """Whether an in-place op (``x[i] = y``, ``x.copy_(y)``) writes device values into a host tensor ``x``."""
    writes = name == "__setitem__" or (name.endswith("_") and not name.startswith("__"))
    return writes and isinstance(args[0], Tensor) and args[0].device.type == "cpu"


def _all_on_host(out: object) -> bool:
    tensors = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    return bool(tensors) and all(t.device.type == "cpu" for t in tensors)


def devices_of(value: object) -> set[str]:
    """The device types of every tensor in a (nested) result: dataclasses' fields, dicts, lists, tuples."""
    found: set[str] = set()

    def visit(x: object) -> None:
        if isinstance(x, torch.Tensor):
            found.add(x.device.type)
        elif hasattr(x, "__dataclass_fields__"):
            for name in x.__dataclass_fields__:
                visit(getattr(x, name))
        elif isinstance(x, dict):
            for item in x.values():
                visit(item)
        elif isinstance(x, Iterable) and not isinstance(x, str):
            for item in x:
                visit(item)

    visit(value)
    return found


def _fakes(out: object) -> list[FakeTensor]:
    return [t for t in tree_flatten(out)[0] if isinstance(t, FakeTensor)]

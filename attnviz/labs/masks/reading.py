"""Read a user's attention mask from a file or an upload, safely, and say how to read its values.

A mask file comes from someone else's code, so nothing in it runs: ``.npy`` is
read with ``allow_pickle=False``, ``.pt`` with ``torch.load(weights_only=True)``,
``.safetensors`` holds no code at all, and ``.csv`` is parsed as numbers. Sizes
are bounded before parsing (bytes) and after (shape). Every way a file can be
wrong raises :class:`MaskFileError` with one line a person can act on.

Three conventions cover the masks real code builds: a bool *keep* mask (True =
may attend, ``scaled_dot_product_attention``), a bool *block* mask (True =
ignore, ``nn.MultiheadAttention``'s ``key_padding_mask``) and a float *additive*
mask (0 keeps, ``-inf`` or a large negative number blocks). :func:`to_keep`
turns each into the keep convention of :mod:`attnviz.core.masks`.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from attnviz import settings
from attnviz.core.files import TooLargeError, kind_of, read_bounded
from attnviz.errors import MaskFileError, PathError
from attnviz.i18n.message import Text, carried, msg

CONVENTIONS = ("keep", "block", "additive")
MASK_SUFFIXES = (".npy", ".pt", ".safetensors", ".csv")
NAME_CHARS = 80  # a file name in a message is shortened to this many characters


@dataclass(frozen=True, eq=False)
class LoadedMask:
    """A mask as read from a file.

    mask: bool or floating, (T, T) or (B, T, T), rectangular (..., q_len, k_len), or broadcast along one side:
    (..., 1, T) or (..., T, 1).
    name: the file name, safe to print. stored_dtype: the dtype in the file ("int64", "float16").
    notes: what reading it changed ("integer 0/1 values read as bool", "(B, 1, T, T) read as (B, T, T)").
    """

    mask: Tensor
    name: str
    stored_dtype: str
    notes: tuple[Text, ...] = ()


def shown_name(filename: str) -> str:
    """A file name fit for a one-line message: its last part, control and bidi characters made visible, shortened."""
    base = re.split(r"[/\\]", str(filename))[-1] or "mask"
    shown = "".join(f"⟨U+{ord(ch):04X}⟩" if unicodedata.category(ch).startswith("C") else ch for ch in base)
    return shown if len(shown) <= NAME_CHARS else shown[: NAME_CHARS - 1] + "…"


def _one_line(err: BaseException, limit: int = 160) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _mib(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:.1f} MiB"


def _check_size(n_bytes: int, name: str) -> None:
    limit = settings.MASK_MAX_BYTES
    if n_bytes > limit:
        raise MaskFileError(msg("mask_io.too_large", name=name, size=_mib(n_bytes), most=_mib(limit)))


def check_shape(shape: tuple[int, ...], name: str = "the mask") -> None:
    """MaskFileError unless ``shape`` is a mask this app reads, within the size limits.

    Accepted: (T, T), (B, T, T), (B, 1, T, T) (one mask for every head), a
    rectangular (..., q_len, k_len) (a decode step or a chunk over a KV cache),
    and a broadcast along one of the last two dims, (..., 1, T) or (..., T, 1);
    :func:`attnviz.labs.masks.doctor.diagnose` judges whether the shape fits.
    The size limits count max(q_len, k_len) as T.
    """
    shape = tuple(int(n) for n in shape)
    dims = f"({', '.join(map(str, shape))})" if len(shape) != 1 else f"({shape[0]},)"
    if len(shape) == 4 and shape[1] != 1:
        raise MaskFileError(msg("mask_io.four_d", name=name, dims=dims))
    if len(shape) not in (2, 3, 4):
        raise MaskFileError(msg("mask_io.rank", name=name, rank=len(shape), dims=dims))
    if 0 in shape:
        raise MaskFileError(msg("mask_io.empty_dims", name=name, dims=dims))
    q_len, k_len = shape[-2:]  # rectangular (a decode step, a chunk over a KV cache) too: the doctor judges it
    T = max(q_len, k_len)
    batch = shape[0] if len(shape) > 2 else 1
    if T > settings.MASK_MAX_SIDE:
        raise MaskFileError(msg("mask_io.side_over", name=name, dims=dims, T=T, most=settings.MASK_MAX_SIDE))
    if batch > settings.MASK_MAX_BATCH:
        raise MaskFileError(msg("mask_io.batch_over", name=name, dims=dims, batch=batch, most=settings.MASK_MAX_BATCH))
    if batch * T * T > settings.MASK_MAX_CELLS:
        raise MaskFileError(
            msg("mask_io.cells_over", name=name, dims=dims, cells=batch * T * T, most=settings.MASK_MAX_CELLS)
        )


def _is_integer(dtype: torch.dtype) -> bool:
    try:
        torch.iinfo(dtype)
    except TypeError:
        return False
    return dtype != torch.bool


def _first_index(cells: Tensor) -> list[int]:
    return cells.nonzero()[0].tolist()


def check_mask(mask: Tensor, name: str = "the mask") -> tuple[Tensor, list[Text]]:
    """A tensor from a file as a bool or floating mask this app reads, and notes on what changed.

    Integer 0/1 masks become bool, (B, 1, T, T) becomes (B, T, T), 1-byte floats
    become float32. MaskFileError for complex or other dtypes, integers other
    than 0/1, NaN, +inf, and every shape :func:`check_shape` refuses.
    """
    notes: list[Text] = []
    if mask.layout != torch.strided or mask.is_quantized:
        kind = "quantized" if mask.is_quantized else str(mask.layout).removeprefix("torch.")
        raise MaskFileError(msg("mask_io.layout", name=name, kind=kind))
    mask = mask.detach().cpu()
    dtype = str(mask.dtype).removeprefix("torch.")
    check_shape(tuple(mask.shape), name)
    if mask.dtype.is_complex:
        raise MaskFileError(msg("mask_io.complex", name=name, dtype=dtype))
    if mask.dtype == torch.bool:
        pass
    elif mask.dtype.is_floating_point:
        if mask.dtype.itemsize < 2:  # float8: too coarse to compute with, exact in float32
            mask = mask.float()
            notes.append(msg("mask_io.read_as_float32", dtype=dtype))
        nan = torch.isnan(mask)
        if bool(nan.any()):
            raise MaskFileError(msg("mask_io.nan", name=name, where=_first_index(nan)))
        pos_inf = torch.isposinf(mask)
        if bool(pos_inf.any()):
            raise MaskFileError(msg("mask_io.pos_inf", name=name, where=_first_index(pos_inf)))
    elif _is_integer(mask.dtype):
        values = mask.to(torch.int64)
        other = (values != 0) & (values != 1)
        if bool(other.any()):
            where = _first_index(other)
            raise MaskFileError(msg("mask_io.integer", name=name, value=int(values[tuple(where)]), where=where))
        mask = values != 0
        notes.append(msg("mask_io.integer_note"))
    else:
        raise MaskFileError(msg("mask_io.dtype", name=name, dtype=dtype))
    if mask.ndim == 4:
        before = tuple(mask.shape)
        mask = mask[:, 0]
        notes.append(msg("mask_io.squeezed", before=before, after=tuple(mask.shape)))
    return mask, notes


def _from_numpy(array: np.ndarray, name: str) -> tuple[Tensor, str]:
    """A numpy array as a torch tensor; MaskFileError for dtypes no mask has."""
    kind = array.dtype.kind
    dtype = str(array.dtype)
    if kind == "O":
        raise MaskFileError(msg("mask_io.object_array", name=name))
    if kind == "c":
        raise MaskFileError(msg("mask_io.complex", name=name, dtype=dtype))
    if kind in "US":
        raise MaskFileError(msg("mask_io.strings", name=name, dtype=dtype))
    if kind not in "biuf":
        raise MaskFileError(msg("mask_io.dtype", name=name, dtype=dtype))
    check_shape(array.shape, name)
    if kind in "iu":
        other = (array != 0) & (array != 1)
        if other.any():
            where = np.argwhere(other)[0].tolist()
            raise MaskFileError(msg("mask_io.integer", name=name, value=array[tuple(where)], where=where))
        return torch.from_numpy(array.astype(np.int64)), dtype
    if kind == "f" and array.dtype.itemsize > 8:
        array = array.astype(np.float64)
    array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("="))
    return torch.from_numpy(array), dtype


def _npy(data: bytes, name: str) -> tuple[Tensor, str]:
    if data.startswith(b"PK\x03\x04"):
        raise MaskFileError(msg("mask_io.npz", name=name))
    if data.startswith(b"\x80"):
        raise MaskFileError(msg("mask_io.pickled", name=name))
    buffer = io.BytesIO(data)
    try:  # the header first: its shape and dtype are checked before numpy allocates anything
        version = np.lib.format.read_magic(buffer)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(buffer)
    except Exception as err:  # a hostile header can raise nearly anything; none of it may escape as a traceback
        raise MaskFileError(msg("mask_io.bad_npy", name=name, error=_one_line(err, 80))) from err
    if dtype.hasobject:
        raise MaskFileError(msg("mask_io.object_array", name=name))
    check_shape(shape, name)
    if int(np.prod(shape)) * dtype.itemsize > len(data) - buffer.tell():
        raise MaskFileError(msg("mask_io.truncated", name=name, shape=shape, dtype=dtype))
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as err:
        if "pickle" in str(err).lower() or "object arrays" in str(err).lower():
            raise MaskFileError(msg("mask_io.pickled", name=name)) from err
        raise MaskFileError(msg("mask_io.bad_npy", name=name, error=_one_line(err, 80))) from err
    except Exception as err:
        raise MaskFileError(msg("mask_io.bad_npy", name=name, error=_one_line(err, 80))) from err
    if not isinstance(array, np.ndarray):
        raise MaskFileError(msg("mask_io.not_one_npy", name=name))
    return _from_numpy(array, name)


def _one_tensor(tensors: dict, name: str, what: Text) -> Tensor:
    """The only tensor of a dict, or the one under "mask"."""
    if len(tensors) == 1 and isinstance(next(iter(tensors.values())), Tensor):
        return next(iter(tensors.values()))
    if isinstance(tensors.get("mask"), Tensor):
        return tensors["mask"]
    keys = ", ".join(shown_name(str(k))[:20] for k in list(tensors)[:6]) + (", …" if len(tensors) > 6 else "")
    raise MaskFileError(msg("mask_io.several", name=name, what=what, keys=keys))


def _pt(data: bytes, name: str) -> tuple[Tensor, str]:
    # torch.save writes a zip archive; its members' sizes bound what loading it can allocate (no zip bombs)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(member.file_size for member in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as err:
        raise MaskFileError(msg("mask_io.not_torch", name=name)) from err
    if unpacked > settings.MASK_MAX_BYTES:
        raise MaskFileError(msg("mask_io.unpacks", name=name, size=_mib(unpacked)))
    try:
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"GLOBAL ([\w.]+)", str(err))
        what = f" ({found.group(1)})" if found else ""
        raise MaskFileError(msg("mask_io.python_objects", name=name, what=what)) from err
    except Exception as err:  # torch raises RuntimeError, KeyError, EOFError… on a damaged archive
        raise MaskFileError(msg("mask_io.corrupt_pt", name=name, error=_one_line(err, 80))) from err
    if isinstance(obj, dict):
        obj = _one_tensor(obj, name, msg("mask_io.a_dict"))
    if not isinstance(obj, Tensor):
        raise MaskFileError(msg("mask_io.not_tensor", name=name, type=type(obj).__name__))
    return obj, str(obj.dtype).removeprefix("torch.")


def _safetensors(data: bytes, name: str) -> tuple[Tensor, str]:
    try:
        from safetensors.torch import load
    except ImportError as err:
        raise MaskFileError(msg("mask_io.no_safetensors")) from err
    try:
        tensors = load(data)
    except Exception as err:  # SafetensorError, or anything a damaged header provokes
        raise MaskFileError(msg("mask_io.bad_safetensors", name=name, error=_one_line(err, 80))) from err
    if not tensors:
        raise MaskFileError(msg("mask_io.no_tensor", name=name))
    mask = _one_tensor(tensors, name, msg("mask_io.several_tensors"))
    return mask, str(mask.dtype).removeprefix("torch.")


def _csv(data: bytes, name: str) -> tuple[Tensor, str]:
    """A CSV of one (T, T) mask: numbers (inf and -inf too), or true/false."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise MaskFileError(msg("mask_io.not_utf8", name=name)) from err
    rows: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            rows.append([cell.strip() for cell in (line.split(",") if "," in line else line.split())])
        if len(rows) > settings.MASK_MAX_SIDE:
            raise MaskFileError(msg("mask_io.too_many_rows", name=name, most=settings.MASK_MAX_SIDE))
    if not rows:
        raise MaskFileError(msg("mask_io.empty", name=name))
    for i, row in enumerate(rows):
        if len(row) != len(rows[0]):
            raise MaskFileError(msg("mask_io.ragged", name=name, row=i + 1, n=len(row), first=len(rows[0])))
    words = {cell.lower() for row in rows for cell in row}
    if words <= {"true", "false"}:
        return torch.tensor([[cell.lower() == "true" for cell in row] for row in rows]), "bool"
    if words <= {"0", "1"}:
        return torch.tensor([[int(cell) for cell in row] for row in rows]), "int64"
    values = []
    for i, row in enumerate(rows):
        try:
            values.append([float(cell) for cell in row])
        except ValueError as err:
            bad = next(j for j, cell in enumerate(row) if not _is_number(cell))
            raise MaskFileError(
                msg("mask_io.not_number", name=name, row=i + 1, column=bad + 1, cell=repr(shown_name(row[bad])[:20]))
            ) from err
    return torch.tensor(values, dtype=torch.float64), "float64"


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


READERS = {".npy": _npy, ".pt": _pt, ".safetensors": _safetensors, ".csv": _csv}


def _suffix(filename: str) -> str:
    """The lower-case extension of a supported format; MaskFileError for any other."""
    suffix = Path(str(filename)).suffix.lower()
    if suffix not in READERS:
        shown = shown_name(suffix)[:20] if suffix else msg("mask_io.no_suffix")
        raise MaskFileError(msg("mask_io.suffix", name=shown_name(filename), suffix=shown))
    return suffix


def read_mask_bytes(data: bytes, filename: str) -> LoadedMask:
    """A mask from an upload's bytes; ``filename``'s extension picks the format. MaskFileError on any problem."""
    name = shown_name(filename)
    suffix = _suffix(filename)
    _check_size(len(data), name)
    mask, stored_dtype = READERS[suffix](bytes(data), name)
    mask, notes = check_mask(mask, name)
    return LoadedMask(mask, name, stored_dtype, tuple(notes))


def read_mask_file(path: str | os.PathLike) -> LoadedMask:
    """A mask from a file on disk, read once with its size cap (:func:`attnviz.core.files.read_bounded`: a FIFO,
    a device, a /proc file or a folder refused, never waited on); MaskFileError, one line, for any problem."""
    path = Path(path)
    name = shown_name(path.name)
    _suffix(path.name)
    try:
        if kind_of(path) is None:
            raise MaskFileError(msg("mask_io.no_file", name=name))
        data = read_bounded(path, settings.MASK_MAX_BYTES)
    except TooLargeError as err:
        if err.size is not None:
            _check_size(err.size, name)
        raise MaskFileError(carried(err) or str(err)) from err
    except PathError as err:
        raise MaskFileError(carried(err) or str(err)) from err
    return read_mask_bytes(data, path.name)


def additive_blocked(mask: Tensor) -> Tensor:
    """Where an additive float mask blocks: -inf, or at most ``settings.MASK_BLOCK_THRESHOLD`` (-1e4).

    The threshold covers -1e9, ``torch.finfo(float16 / float32).min`` and the -10000 of older Hugging Face code.
    """
    return torch.isneginf(mask) | (mask <= settings.MASK_BLOCK_THRESHOLD)


def additive_bias(mask: Tensor) -> Tensor:
    """The cells of an additive mask that neither keep cleanly (0) nor block: a bias such as +1 or -3."""
    return (mask != 0) & ~additive_blocked(mask)


def to_keep(mask: Tensor, convention: str) -> Tensor:
    """The mask as bool, True where a query may attend: same shape.

    keep: as is; block: ``~mask``; additive: kept unless -inf or <= -1e4 (finite
    values in between are kept: a bias, not masking). ValueError when the dtype
    does not fit the convention.
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {', '.join(CONVENTIONS)}, not {convention!r}")
    if convention == "additive":
        if not mask.dtype.is_floating_point:
            raise ValueError(f"an additive mask is floating point, not {mask.dtype}")
        return ~additive_blocked(mask)
    if mask.dtype != torch.bool:
        raise ValueError(f"the {convention} convention reads a bool mask, not {mask.dtype}")
    return mask if convention == "keep" else ~mask


def infer_convention(mask: Tensor, offset: int = 0) -> tuple[str, Text]:
    """The likely convention of a mask, and one sentence saying why.

    A float mask is additive. A bool mask is read whichever way keeps most of the
    diagonal: a query almost always sees its own position, so a diagonal that is
    all False says True marks blocked keys. ``offset``: row i's own position is
    column offset + i (a rectangular mask over a KV cache: k_len - q_len).
    """
    if mask.dtype.is_floating_point:
        return "additive", msg("mask_io.why_additive")
    if mask.dtype != torch.bool:
        raise ValueError(f"a mask is bool or floating point, not {mask.dtype}")
    diagonal = mask.diagonal(offset=offset, dim1=-2, dim2=-1)  # (..., min(q_len, k_len - offset))
    n_true, n = int(diagonal.sum()), diagonal.numel()
    if n_true * 2 >= n:
        return "keep", msg("mask_io.why_keep", k=n_true, n=n)
    return "block", msg("mask_io.why_block", k=n - n_true, n=n)

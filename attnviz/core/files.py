"""Reading a file a user names, safely: opened once, checked to be a regular file, read with a size cap while reading.

A path typed on the command line or into a page can name a FIFO (``open`` then ``read`` waits forever for a
writer), a device (``/dev/zero`` never ends, ``/dev/urandom`` is as long as you read), a ``/proc`` pseudo-file
(size 0 to ``stat``, then any length), a folder, a symlink to any of these, a loop of links, or a name longer
than the file system allows. So a file is opened once with ``O_NONBLOCK | O_NOCTTY`` (a FIFO or a terminal
cannot block the open), what was opened is checked with ``fstat`` (the symlink's target, not the link), and it
is read to at most ``max_bytes + 1`` bytes: a size is never taken from ``stat`` and trusted for the read.
Every problem is one :class:`~attnviz.errors.PathError` whose message names the path (its control characters
made visible, a long one cut in the middle with its length said) and the reason.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import unicodedata
from collections.abc import Iterator
from pathlib import Path

from attnviz.errors import PathError
from attnviz.i18n.message import Text, msg

OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
READ_CHUNK = 1 << 20
PATH_SHOWN_CHARS = 80  # a path in a message is cut in the middle to about this many characters
PSEUDO_ROOTS = ("/proc", "/sys")  # files there are generated as they are read: their size says nothing

_KIND_OF_MODE = (
    (stat.S_ISDIR, "files.kind_directory"),
    (stat.S_ISFIFO, "files.kind_fifo"),
    (stat.S_ISCHR, "files.kind_char_device"),
    (stat.S_ISBLK, "files.kind_block_device"),
    (stat.S_ISSOCK, "files.kind_socket"),
)
_REASON_OF_ERRNO = {
    errno.ENOENT: "files.reason_missing",
    errno.ENOTDIR: "files.reason_not_dir",
    errno.EACCES: "files.reason_permission",
    errno.EPERM: "files.reason_permission",
    errno.ENAMETOOLONG: "files.reason_too_long",
    errno.ELOOP: "files.reason_loop",
    errno.EISDIR: "files.reason_is_dir",
}


def printable(text: str) -> str:
    """``text`` with every control, format, separator or unassigned character written as Python writes it in a
    repr (``\\n``, ``\\x1b``, ``\\u202e``): what a terminal line echoes of a user's value, so that a newline or an
    ANSI escape in it is shown, never obeyed. Everything else (letters of any script, spaces) is kept."""
    out = []
    for ch in text:
        if unicodedata.category(ch)[0] == "C" or unicodedata.category(ch) in ("Zl", "Zp"):
            out.append(ch.encode("unicode_escape", errors="backslashreplace").decode("ascii"))
        else:
            out.append(ch)
    return "".join(out)


def _path_text(path: str | os.PathLike | bytes) -> str:
    try:
        return os.fsdecode(path)
    except (TypeError, UnicodeError):
        return repr(path)


def shown_path(path: str | os.PathLike | bytes) -> Text | str:
    """A path for a one-line message: quoted, control characters made visible (:func:`printable`), and a path of
    more than :data:`PATH_SHOWN_CHARS` characters cut in the middle, with its length said."""
    text = _path_text(path)
    shown = printable(text)
    if len(shown) <= PATH_SHOWN_CHARS:
        return f"'{shown}'"
    half = PATH_SHOWN_CHARS // 2 - 1
    return msg("files.path_cut", head=shown[:half], tail=shown[-half:], n=len(text))


def path_error(path: str | os.PathLike | bytes, err: BaseException) -> PathError:
    """The one-line error for an OS error (or a path the OS cannot take: a NUL byte, an unencodable name)."""
    shown = shown_path(path)
    if isinstance(err, OSError):
        key = _REASON_OF_ERRNO.get(err.errno)
        reason = msg(key) if key else (err.strerror or type(err).__name__)
        return PathError(msg("files.cannot_open", path=shown, reason=reason))
    if isinstance(err, UnicodeError):
        return PathError(msg("files.cannot_open", path=shown, reason=msg("files.reason_encoding")))
    return PathError(msg("files.cannot_open", path=shown, reason=msg("files.reason_nul")))


def _kind_key(mode: int) -> str | None:
    """The message key of a file that is not a regular one (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    return next((key for test, key in _KIND_OF_MODE if test(mode)), "files.kind_other")


def _pseudo_devices() -> set[int]:
    devices = set()
    for root in PSEUDO_ROOTS:
        try:
            devices.add(os.stat(root).st_dev)
        except OSError:
            continue
    return devices


def _is_pseudo(path: str | os.PathLike | bytes, info: os.stat_result) -> bool:
    """Whether an opened regular file lives in /proc or /sys, where sizes are made up as the file is read."""
    if info.st_dev in _pseudo_devices():
        return True
    try:
        real = os.path.realpath(_path_text(path))
    except (OSError, ValueError):
        return False
    return any(real == root or real.startswith(root + "/") for root in PSEUDO_ROOTS)


def kind_of(path: str | os.PathLike | bytes) -> str | None:
    """What ``path`` names, symlinks followed: "file" (a regular one), "directory", "other" (a FIFO, a device, a
    socket), or None when nothing is there (no such name, or a part of it is not a folder). PathError for every
    other OS error (too long, a link loop, permission denied), one line. ``stat`` never blocks, not even on a FIFO."""
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise path_error(path, err) from err
    except (ValueError, UnicodeError) as err:
        raise path_error(path, err) from err
    if stat.S_ISREG(mode):
        return "file"
    return "directory" if stat.S_ISDIR(mode) else "other"


def _open_regular(path: str | os.PathLike | bytes) -> tuple[int, os.stat_result]:
    """An fd open on ``path``'s regular file, and its fstat; PathError (fd closed) for anything else."""
    try:
        fd = os.open(path, OPEN_FLAGS)
    except OSError as err:
        raise path_error(path, err) from err
    except (ValueError, UnicodeError, TypeError) as err:
        raise path_error(path, err) from err
    try:
        info = os.fstat(fd)
        key = _kind_key(info.st_mode)
        if key is not None:
            raise PathError(msg("files.not_regular", path=shown_path(path), kind=msg(key)))
        if _is_pseudo(path, info):
            raise PathError(msg("files.pseudo", path=shown_path(path)))
    except BaseException:
        os.close(fd)
        raise
    return fd, info


class TooLargeError(PathError):
    """A file over a size cap: ``size`` is its size when the file system knew it before reading (None when the
    cap was reached while reading), ``most`` the cap, both in bytes."""

    def __init__(self, message, size: int | None, most: int):
        super().__init__(message)
        self.size, self.most = size, most


def _size_text(n_bytes: int) -> str:
    if n_bytes < 2**10:
        return f"{n_bytes:,} B"
    if n_bytes < 2**20:
        return f"{n_bytes / 2**10:,.1f} KiB"
    return f"{n_bytes / 2**20:,.1f} MiB"


def check_regular(path: str | os.PathLike | bytes, max_bytes: int | None = None) -> int:
    """The size of ``path``'s regular file, checked by opening it (symlinks followed, nothing read); PathError
    when it is not a regular file or is larger than ``max_bytes``. For files another library opens after us
    (a tokenizer, weights): a regular file's fstat size is its size."""
    fd, info = _open_regular(path)
    os.close(fd)
    if max_bytes is not None and info.st_size > max_bytes:
        raise _too_large(path, info.st_size, max_bytes)
    return info.st_size


def _too_large(path, size: int | None, most: int) -> TooLargeError:
    return TooLargeError(msg("files.too_large", path=shown_path(path), most=_size_text(most)), size, most)


def read_bounded(path: str | os.PathLike | bytes, max_bytes: int) -> bytes:
    """The bytes of ``path``'s regular file, at most ``max_bytes`` of them; PathError, one line, for anything else.

    The cap holds while reading (at most ``max_bytes + 1`` bytes are ever read), so a file that grows, or one
    whose size lies, stops there.
    """
    fd, info = _open_regular(path)
    if info.st_size > max_bytes:  # refused at once; a file whose size says less is still cut while reading
        os.close(fd)
        raise _too_large(path, info.st_size, max_bytes)
    chunks, total = [], 0
    try:
        while total <= max_bytes:
            try:
                chunk = os.read(fd, min(READ_CHUNK, max_bytes + 1 - total))
            except BlockingIOError as err:  # a regular file on a file system that would make us wait
                raise path_error(path, err) from err
            except OSError as err:
                raise path_error(path, err) from err
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    if total > max_bytes:
        raise _too_large(path, None, max_bytes)
    return b"".join(chunks)


def folder_entries(folder: str | os.PathLike, max_entries: int) -> list[Path]:
    """The entries of ``folder`` (names only, not followed), at most ``max_entries``; PathError for an OS error
    or a folder holding more."""
    entries = []
    try:
        with os.scandir(folder) as scan:
            for entry in scan:
                entries.append(Path(folder) / entry.name)
                if len(entries) > max_entries:
                    raise PathError(msg("files.too_many_entries", path=shown_path(folder), most=max_entries))
    except OSError as err:
        raise path_error(folder, err) from err
    except (ValueError, UnicodeError) as err:
        raise path_error(folder, err) from err
    return entries


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Held by one process at a time (its folder made if missing): the others wait at the ``with`` until it is
    released, e.g. two app servers converting the same model, or test workers sharing one build."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)

"""Whose error it is when a model's pass fails: the model's, attnviz's, or the device's memory.

One decision, :func:`error_in_pass`, for every pass (``attnviz.models.source.running`` around it): out of memory
anywhere is :func:`~attnviz.core.memory_errors.one_line` (naming the device, the cache handed back); an error
raised in the model's own code (transformers' modeling code, the torch modules it calls, a checkpoint's remote
code) is the model's, one line; one raised in attnviz's own code, or in torch called directly by it, is a bug,
:class:`~attnviz.errors.AttnvizBugError`, never relabelled as the model's. Who raised it is read from the
traceback: the innermost frame that is neither torch's nor Python's own decides, since torch's frames are
plumbing whoever called them.
"""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from pathlib import Path
from types import FrameType, TracebackType

from attnviz.core.memory_errors import is_out_of_memory, one_line
from attnviz.errors import AttnvizBugError, ModelUnavailableError, first_line
from attnviz.i18n.message import msg

PACKAGE = Path(__file__).resolve().parents[1]  # attnviz/
# packages (or whole modules) that are no one's code: who called them decides
PLUMBING = frozenset({"torch", "accelerate", *sys.stdlib_module_names})


class Owner(StrEnum):
    ATTNVIZ = "attnviz"
    MODEL = "model"
    PLUMBING = "plumbing"


def frame_owner(frame: FrameType) -> Owner:
    """Whose code a frame runs: attnviz's package, torch's or Python's own (plumbing), or anyone else's (the
    model: transformers, a checkpoint's remote code, a module a test defines)."""
    module = frame.f_globals.get("__name__") or ""
    top = module.partition(".")[0]
    if top == "attnviz" or frame.f_code.co_filename.startswith(f"{PACKAGE}{os.sep}"):
        return Owner.ATTNVIZ
    return Owner.PLUMBING if top in PLUMBING or module in PLUMBING else Owner.MODEL


def traceback_frames(tb: TracebackType | None) -> list[tuple[FrameType, int]]:
    """The traceback's frames with their lines, outermost first."""
    frames = []
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return frames


def raised_by(err: BaseException) -> Owner:
    """Who raised ``err``: the owner of its innermost frame that is not plumbing (the model when none is)."""
    for frame, _ in reversed(traceback_frames(err.__traceback__)):
        if (owner := frame_owner(frame)) is not Owner.PLUMBING:
            return owner
    return Owner.MODEL


def bug_site(err: BaseException) -> str:
    """Where in attnviz ``err`` was raised, its innermost frame of attnviz's: ``attnviz/core/x.py:12 in f``."""
    for frame, line in reversed(traceback_frames(err.__traceback__)):
        if frame_owner(frame) is Owner.ATTNVIZ:
            path = Path(frame.f_code.co_filename)
            shown = path.relative_to(PACKAGE.parent).as_posix() if path.is_relative_to(PACKAGE.parent) else path.name
            return f"{shown}:{line} in {frame.f_code.co_name}"
    return "attnviz"


def attnviz_bug(err: BaseException) -> AttnvizBugError:
    """``err`` said as attnviz's bug, in one line: its type, its first line and where it was raised."""
    said = first_line(err)
    if not said.startswith(type(err).__name__):
        said = f"{type(err).__name__}: {said}"
    return AttnvizBugError(msg("model_errors.attnviz_bug", error=said, where=bug_site(err)))


def error_in_pass(err: BaseException, name: str, device: str | None = None) -> BaseException | None:
    """What ``err``, raised while the model ``name`` ran on ``device``, becomes; None: raise it as it is.

    - attnviz's own one-line errors (:class:`ModelUnavailableError`, out of memory among them) stay as they are;
    - out of memory, whoever asked for the memory: the one-line message naming the device (the exception's, else
      ``device``), after the device's cached blocks are handed back;
    - a file-system error: the model's (a disk, a permission, an offload folder), whoever opened the file;
    - anything else raised in attnviz's code (or in torch called directly by it): :class:`AttnvizBugError`;
    - raised in the model's own code: ``model_errors.failed_running``, in one line.
    """
    if isinstance(err, ModelUnavailableError):
        return None
    if is_out_of_memory(err):
        return one_line(err, None if device is None else str(device))
    if not isinstance(err, OSError) and raised_by(err) is Owner.ATTNVIZ:
        return attnviz_bug(err)
    return ModelUnavailableError(msg("model_errors.failed_running", name=name, error=first_line(err)))

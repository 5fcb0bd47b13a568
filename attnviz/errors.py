"""Every error attnviz raises for something a user can fix, in one leaf module that every layer may import.

Each carries a :class:`~attnviz.i18n.message.Message`: ``str(err)`` is the
English sentence the CLI prints in one line; the app shows the same message in
the reader's language (``attnviz.app.widgets.show_error``). Programming errors
stay the built-in ones, except where a model's pass meets one of attnviz's own: :class:`AttnvizBugError` says
so, so that it is never taken for the model's.
"""

from __future__ import annotations

from attnviz.i18n.message import msg


class ModelUnavailableError(RuntimeError):
    """A model cannot be loaded or run; the message says why and what to do."""


class ParityUnsupportedError(ValueError):
    """There is no other implementation of this source's attention to compare ours with."""


class GenerationUnsupportedError(ValueError):
    """The source has no language-model head to generate with."""


class ConfigError(ValueError):
    """A config that cannot be read or used; the one-line message names the missing or bad field."""


class PathError(ValueError):
    """A path a user named that cannot be read safely: missing, too long, a loop, not permitted, not a regular
    file (a FIFO, a device, a /proc file, a folder) or over a size cap. One line naming the path and the reason."""


class MaskFileError(ValueError):
    """A mask file that cannot be read safely: pickled, corrupt, unsupported or too large. One line."""


class ExportTooLargeError(ValueError):
    """A tensor export over the bound; the message gives both sizes."""


class TrainingCapError(ValueError):
    """A session asked for more training time than hosted mode allows it in the window."""

    def __init__(self, used_s: float, needed_s: float, wait_s: float, *, cap_s: float, window_s: float):
        self.used_s, self.needed_s, self.wait_s = used_s, needed_s, wait_s
        self.cap_s, self.window_s = cap_s, window_s
        super().__init__(
            msg("bounds.training_cap", used=used_s, minutes=int(window_s // 60), needed=needed_s, cap=cap_s)
        )


def first_line(err: BaseException) -> str:
    """An exception's first line of text (its type's name when it has none), for a one-line message; a first
    line that only announces the next ("…:") is joined with it."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    if lines[0].endswith(":") and len(lines) > 1:  # "Class validation error for validator …:" then the reason
        return f"{lines[0]} {lines[1]}"
    if isinstance(err, KeyError) or " " not in lines[0]:  # a bare key or word ("'attnviz'") says nothing alone
        return f"{type(err).__name__}: {lines[0]}"
    return lines[0]


class OutOfMemoryError(ModelUnavailableError):
    """A device ran out of memory: the message names the device, what was asked and what was free, and what to
    try (fewer tokens, a device map, a smaller dtype). A ModelUnavailableError, so every place that shows why a
    model cannot run shows this too."""


class AttnvizBugError(Exception):
    """An error raised in attnviz's own code while a model ran: a bug, not the model's or the user's. The message
    is one line (what was raised and where); the original is chained, and its traceback goes to the server log
    (the app) or to stderr with ``ATTNVIZ_TRACEBACK=1`` (the CLI). Not a RuntimeError or a ValueError, so no page
    or command that catches the user's errors by kind takes it for one."""


class AppStartError(RuntimeError):
    """The app cannot be started from this process (:func:`attnviz.notebook.open_in_app`): its port is taken, its
    script is not in this installation, its server did not answer. One line saying why and what to do."""


class ClusterUnavailableError(ValueError):
    """A corpus run cannot reach the cluster it was sent to (``corpus --ray``): Ray is not installed (the message
    says ``pip install attnviz[ray]``), or no Ray cluster answers at the address. One line; a ValueError, so a
    command reports it as bad input (exit 2)."""

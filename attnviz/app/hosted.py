"""Hosted mode: what a server open to strangers allows.

A hosted server (``ATTNVIZ_HOSTED=1``, or ``streamlit run app.py -- --hosted``)
offers an allowlist of models only: the embedded model, the bundled ones and
the folders its operator lists in ``ATTNVIZ_MODELS``. Nothing a visitor types
or links to is opened as a path or a hub id, and a refusal reads the same
whether the path exists or not, so the server's files cannot be probed. A
session's training time is capped by a :class:`TrainingLedger`. What one request
may cost is priced in :mod:`attnviz.core.budget`, hosted or not.

No Streamlit here: the sidebar and the pages ask and show the answers.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from attnviz import settings
from attnviz.errors import TrainingCapError
from attnviz.i18n.translate import t, tr
from attnviz.models.registry import CHOICES, lent_choices

TRUE_WORDS = {"1", "true", "yes", "on"}


def is_hosted(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> bool:
    """Whether this server runs in hosted mode: ``--hosted`` after ``--`` or ``ATTNVIZ_HOSTED`` set to 1/true/yes/on."""
    argv = sys.argv[1:] if argv is None else argv
    environ = os.environ if environ is None else environ
    return settings.HOSTED_FLAG in argv or environ.get(settings.HOSTED_ENV, "").strip().lower() in TRUE_WORDS


def operator_models(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The model folders the operator offers (``ATTNVIZ_MODELS=/models/a,/models/b``): {key: display name}.

    The key is the folder as the operator wrote it (what a ``?model=`` link names); the display name is the
    folder's last part. Nothing here touches the disk: a listed folder that cannot load says so when chosen.
    """
    environ = os.environ if environ is None else environ
    folders = [part.strip() for part in environ.get(settings.MODELS_ENV, "").split(",")]
    return {folder: Path(folder).name or folder for folder in folders if folder}


def allowed_model(choice: object, offered: Mapping[str, object]) -> bool:
    """Whether ``choice`` is exactly one of the ``offered`` keys (a string: never a path it resolves to)."""
    return isinstance(choice, str) and choice in offered


@dataclass
class TrainingLedger:
    """One session's training time: (end time, seconds) of each training, kept for the window it counts in."""

    spent: list[tuple[float, float]] = field(default_factory=list)
    cap_s: float = settings.TRAIN_SESSION_SECONDS
    window_s: float = settings.TRAIN_SESSION_WINDOW_S

    def used(self, now: float) -> float:
        """Seconds trained in the window that ends ``now``."""
        self.spent = [(end, s) for end, s in self.spent if end > now - self.window_s]
        return sum(s for _, s in self.spent)

    def check(self, needed_s: float, now: float) -> None:
        """TrainingCapError when ``needed_s`` more would take this session over its cap; says how long to wait."""
        used = self.used(now)
        if used + needed_s <= self.cap_s:
            return
        free, wait = used + needed_s - self.cap_s, 0.0
        for end, seconds in sorted(self.spent):  # the oldest trainings leave the window first
            wait, free = end + self.window_s - now, free - seconds
            if free <= 0:
                break
        if needed_s > self.cap_s:
            wait = math.inf
        raise TrainingCapError(used, needed_s, max(0.0, wait), cap_s=self.cap_s, window_s=self.window_s)

    def charge(self, seconds: float, now: float) -> None:
        self.spent.append((now, max(0.0, seconds)))


def model_options() -> dict[str, str | None]:
    """The sidebar's models: the embedded and bundled ones, the operator's folders (``ATTNVIZ_MODELS``) and,
    except on a hosted server, a free path or hub id ("path")."""
    offered = {**CHOICES, **lent_choices(), **operator_models()}  # lent: a notebook's models (open_in_app)
    return offered if is_hosted() else {**offered, "path": None}


def model_label(choice: str) -> str:
    """A model choice's name in the reader's language."""
    label = model_options().get(choice)
    return tr(label) if label else t("sidebar.model_path_choice")

"""Hosted mode and the request budget: what a server open to strangers allows, and what one request may cost.

A hosted server (``ATTNVIZ_HOSTED=1``, or ``streamlit run app.py -- --hosted``)
offers an allowlist of models only: the embedded model, the bundled ones and
the folders its operator lists in ``ATTNVIZ_MODELS``. Nothing a visitor types
or links to is opened as a path or a hub id, and a refusal reads the same
whether the path exists or not, so the server's files cannot be probed.

Every request, hosted or not, is priced before any work: tokens x layers x
heads against :data:`attnviz.settings.REQUEST_HEAD_TOKENS`, the budget of
SmolLM2's largest request. The record grows linearly in it (capture's
``predicted_nbytes``) and the time in it x tokens. A hosted server refuses a
request over it; a local one asks first. A session's training time is capped
by a :class:`TrainingLedger`.

No Streamlit here: ``attnviz.ui`` asks and shows the answers.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from attnviz import settings
from attnviz.capture import predicted_nbytes
from attnviz.i18n import t

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


@dataclass(frozen=True)
class RequestCost:
    """What one capture will cost, priced before it runs.

    head_tokens: tokens x layers x heads, against ``budget``; peak_bytes and seconds are estimates of the whole
    process's peak memory and the capture's time (fitted on ``benchmarks/capture.py``, 2 CPU cores).
    """

    tokens: int
    n_layer: int
    n_head: int
    head_tokens: int
    budget: int
    peak_bytes: int
    seconds: float

    @property
    def over(self) -> bool:
        return self.head_tokens > self.budget

    @property
    def max_tokens(self) -> int:
        """The most tokens this model's layers x heads may read within the budget."""
        return self.budget // (self.n_layer * self.n_head)

    @property
    def max_layer_heads(self) -> int:
        """The most layers x heads that may read this many tokens within the budget."""
        return self.budget // max(1, self.tokens)

    @property
    def peak_gb(self) -> float:
        return self.peak_bytes / 1e9


def request_cost(
    n_layer: int, n_head: int, n_kv_head: int, head_dim: int, tokens: int, budget: int | None = None
) -> RequestCost:
    """Price a capture of ``tokens`` tokens through ``n_layer`` x ``n_head`` heads; ValueError on a size below 1."""
    for name, value in (("n_layer", n_layer), ("n_head", n_head), ("n_kv_head", n_kv_head), ("head_dim", head_dim)):
        if value < 1:
            raise ValueError(t("model_errors.at_least_one", name=name, value=value))
    tokens = max(1, tokens)
    budget = settings.REQUEST_HEAD_TOKENS if budget is None else budget
    record = predicted_nbytes(n_layer, n_head, n_kv_head, head_dim, tokens)
    cells = tokens * tokens * n_layer * n_head  # every head's (T, T) scores
    return RequestCost(
        tokens=tokens,
        n_layer=n_layer,
        n_head=n_head,
        head_tokens=tokens * n_layer * n_head,
        budget=budget,
        peak_bytes=settings.PEAK_BASE_BYTES + math.ceil(settings.PEAK_RECORD_FACTOR * record),
        seconds=cells * settings.SECONDS_PER_CELL,
    )


class TrainingCapError(ValueError):
    """A session asked for more training time than hosted mode allows it in the window."""

    def __init__(self, used_s: float, needed_s: float, wait_s: float):
        self.used_s, self.needed_s, self.wait_s = used_s, needed_s, wait_s
        super().__init__(
            t(
                "bounds.training_cap",
                used=used_s,
                minutes=settings.TRAIN_SESSION_WINDOW_S // 60,
                needed=needed_s,
                cap=settings.TRAIN_SESSION_SECONDS,
            )
        )


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
        raise TrainingCapError(used, needed_s, max(0.0, wait))

    def charge(self, seconds: float, now: float) -> None:
        self.spent.append((now, max(0.0, seconds)))


def training_seconds(macs: int) -> float:
    """The Training page's estimate of a training's time from its multiply-adds (2 CPU cores)."""
    return macs / 1e12 * settings.TRAIN_SECONDS_PER_TMAC


__all__ = [
    "RequestCost",
    "TrainingCapError",
    "TrainingLedger",
    "allowed_model",
    "is_hosted",
    "operator_models",
    "request_cost",
    "training_seconds",
]

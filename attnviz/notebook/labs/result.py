"""What every notebook lab returns, and what the labs share: the model borrowed for one call, the words in the
reader's language, the checks the command line makes before it runs.

A lab's result is a small frozen :class:`LabResult`: its table (``frame``), the figures the app's page draws
(``figures``), the command line's ``--json`` object where it has one (``json``) and the lab's own result
(``found``). In a notebook it shows itself as its figures, offline: plotly.js is written into the first output of a
kernel in full, and later outputs use it from the page (plotly's own ``to_html``).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from attnviz import settings
from attnviz.errors import ModelUnavailableError
from attnviz.i18n.message import msg
from attnviz.i18n.translate import set_language

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from attnviz.models.source import AttentionSource, Capability

T = TypeVar("T")

_kernel = {"plotly_sent": False}  # this process (a notebook's kernel) has written plotly.js into an output


class OverBudgetError(ValueError):
    """A lab's predicted time is over the budget the command line keeps (pass ``over_budget=True`` to run it)."""


@dataclass(frozen=True, eq=False, repr=False)
class LabResult:
    """One lab run on one text.

    lab: which lab ("ablation", "sweep", "estimate", "patching", "direct_logits", "mask_doctor"); frame: its table;
    figures: what the app's page draws, the main one first; json: the command line's ``--json`` object for the same
    request (the lab's own ``to_json`` where the command line has none); found: the lab's own result object;
    extra: the lab's other results, by name (the sweep, one head's positions, the mask doctor's notes).
    """

    lab: str
    frame: pd.DataFrame
    figures: tuple[go.Figure, ...]
    json: dict
    found: Any = None
    extra: dict = field(default_factory=dict)

    @property
    def figure(self) -> go.Figure | None:
        """The main figure (the first of :attr:`figures`); None where there is nothing to draw (a mask of a shape
        the doctor cannot read)."""
        return self.figures[0] if self.figures else None

    def to_html(self, include_plotlyjs: bool = True) -> str:
        """The figures as one HTML fragment; ``include_plotlyjs``: plotly.js written in full into it (it then
        opens alone, offline), else it uses the page's."""
        if not self.figures:  # nothing to draw: the table says what was found
            return f'<div class="attnviz-lab" data-lab="{self.lab}">{self.frame.to_html(escape=True)}</div>'
        parts = [
            fig.to_html(full_html=False, include_plotlyjs=include_plotlyjs and index == 0)
            for index, fig in enumerate(self.figures)
        ]
        return f'<div class="attnviz-lab" data-lab="{self.lab}">{"".join(parts)}</div>'

    def __repr__(self) -> str:  # a notebook saves it beside the HTML as the output's text: short, not the figures
        rows, columns = self.frame.shape
        return f"<attnviz {self.lab}: a table of {rows:,} rows x {columns} columns, {len(self.figures)} figure(s)>"

    def save(self, path: str | Path) -> None:
        """The figures as a page of their own, plotly.js in it: it opens anywhere, offline."""
        body = self.to_html(include_plotlyjs=True)
        page = f'<!doctype html><html><head><meta charset="utf-8"></head><body>{body}</body></html>'
        Path(path).write_text(page, encoding="utf-8")

    def _repr_html_(self) -> str:
        """Jupyter's rich display: plotly.js in full in this kernel's first output, none in the later ones."""
        first = not _kernel["plotly_sent"]
        _kernel["plotly_sent"] = not first or bool(self.figures)  # an output that drew nothing carried nothing
        return self.to_html(include_plotlyjs=first)


def forget_plotly() -> None:
    """Write plotly.js into the next lab output again (after clearing the output that held it, or in a test)."""
    _kernel["plotly_sent"] = False


def in_language(lang: str, build: Callable[[], T]) -> T:
    """``build()`` with the figures' words in ``lang`` ("en", "zh"), the kernel's own language left as it was."""

    def run() -> T:
        set_language(lang)
        return build()

    return contextvars.copy_context().run(run)


@contextmanager
def borrowed(model: Any, tokenizer: Any, name: str | None = None) -> Iterator[AttentionSource]:
    """The model as an attnviz source for one call, restored after it (hooks removed, its attention and training
    mode as they were): :func:`attnviz.models.registry.borrowed_source`. An attnviz source given with no tokenizer
    is used as it is."""
    from attnviz.models.source import AttentionSource

    if tokenizer is None and isinstance(model, AttentionSource):
        yield model
        return
    from attnviz.models.registry import borrowed_source

    with borrowed_source(model, tokenizer, name=name) as source:
        yield source


def checked_text(text: str, what: str = "the text") -> str:
    """``text`` when it has words; ValueError (the command line's sentence) otherwise."""
    if not isinstance(text, str):
        raise TypeError(f"{what} is a str, not {type(text).__name__}")
    if not text.strip():
        raise ValueError(msg("notebook_labs.empty_text", what=what))
    return text


def checked_max_tokens(max_tokens: int | None) -> int:
    """The most tokens a lab may read before its own limit applies (SWEEP_TOKENS, PATCH_TOKENS, ...): None is no
    cut of its own, as ``show`` reads the whole text; ValueError out of the sidebar's and the command line's range."""
    if max_tokens is None:
        return settings.MAX_TOKENS.high
    return settings.MAX_TOKENS.check(int(max_tokens))


def require(source: AttentionSource, capability: Capability, key: str, **values: Any) -> None:
    """ModelUnavailableError (``key``'s one line) unless ``source`` can do ``capability``."""
    if capability not in source.capabilities:
        raise ModelUnavailableError(msg(key, name=source.name, **values))


def over_budget(key: str, **values: Any) -> OverBudgetError:
    """The error of a lab predicted to take longer than the command line's budget (``attnviz ablate --heads all``,
    ``attnviz patch``): ``key``'s sentence with the numbers, the budget and what fits."""
    from attnviz.cli.ablate import SWEEP_BUDGET_S

    return OverBudgetError(msg(key, budget=SWEEP_BUDGET_S, **values))

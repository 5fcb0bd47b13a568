"""Which model to open, and opening it: the one place that knows the concrete source classes.

A :class:`SourceSpec` is what the sidebar or the CLI asks for (hashable, so
caches key on it). :func:`open_source` turns it into an
:class:`~attnviz.source.AttentionSource`; everything after that asks the source
what it can do.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from attnviz.bundled import BUNDLED, Progress, needs_preparation, prepared_folder
from attnviz.embedded import EmbeddedConfig, EmbeddedModel
from attnviz.i18n import t
from attnviz.source import AttentionSource

EMBEDDED = "default"


class _Choices(Mapping[str, str]):
    """The models the sidebar offers, {key: title}: the embedded model's title in the session's language (the
    bundled models' titles are names), read when asked, so one module-level mapping serves every session."""

    def __getitem__(self, key: str) -> str:
        if key == EMBEDDED:
            return t("sources.embedded")
        return BUNDLED[key].title

    def __iter__(self) -> Iterator[str]:
        return iter((EMBEDDED, *BUNDLED))

    def __len__(self) -> int:
        return 1 + len(BUNDLED)


CHOICES: Mapping[str, str] = _Choices()


@dataclass(frozen=True)
class SourceSpec:
    """A model to open: ``source`` is "default" (embedded, sized by ``config``), a bundled
    model key ("minilm", "smollm2"), or a local folder / hub id."""

    source: str
    device: str = "cpu"
    config: EmbeddedConfig | None = None
    allow_pickle: bool = False

    @property
    def title(self) -> str:
        return CHOICES.get(self.source, self.source)


def preparation_note(spec: SourceSpec) -> str | None:
    """What a one-time slow step will do before ``spec`` opens (None when it opens at once)."""
    return needs_preparation(spec.source)


def prepare_source(spec: SourceSpec, progress: Progress | None = None) -> None:
    """Do ``spec``'s one-time slow step now (SmolLM2's GGUF conversion), reporting progress; else nothing."""
    if spec.source in BUNDLED:
        prepared_folder(spec.source, progress)


def open_source(spec: SourceSpec, progress: Progress | None = None) -> AttentionSource:
    """Load the model ``spec`` names; ModelUnavailableError (with what to do) when it cannot be."""
    if spec.source == EMBEDDED:
        return EmbeddedModel(spec.config or EmbeddedConfig()).to(spec.device)
    from attnviz.hf_source import load_hf_source

    return load_hf_source(spec.source, spec.device, allow_pickle=spec.allow_pickle, progress=progress)

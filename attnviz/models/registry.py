"""Which model to open, and opening it: the one place that knows the concrete source classes.

A :class:`SourceSpec` is what the sidebar or the CLI asks for (hashable, so
caches key on it). :func:`open_source` turns it into an
:class:`~attnviz.models.source.AttentionSource`; everything after that asks the source
what it can do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from attnviz.i18n.message import Text, msg
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.models.hf.bundled import BUNDLED, Progress, needs_preparation, prepared_folder
from attnviz.models.source import AttentionSource

EMBEDDED = "default"


# the models the sidebar offers, {key: title}: the embedded model's title is a message (the bundled models' are names)
CHOICES: Mapping[str, Text | str] = {EMBEDDED: msg("sources.embedded"), **{key: b.title for key, b in BUNDLED.items()}}


@dataclass(frozen=True)
class SourceSpec:
    """A model to open: ``source`` is "default" (embedded, sized by ``config``), a bundled
    model key ("minilm", "smollm2"), or a local folder / hub id."""

    source: str
    device: str = "cpu"
    config: EmbeddedConfig | None = None
    allow_pickle: bool = False

    @property
    def title(self) -> Text | str:
        return CHOICES.get(self.source, self.source)


def preparation_note(spec: SourceSpec) -> Text | None:
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
    from attnviz.models.hf.loading import load_hf_source

    return load_hf_source(spec.source, spec.device, allow_pickle=spec.allow_pickle, progress=progress)

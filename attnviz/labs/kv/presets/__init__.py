"""Presets: real models' config.json fields, each with where the numbers come from.

The KV-cache estimator page offers these so an engineer can size a GPU without
downloading anything. Each preset is one JSON file beside this module,
``<key>.json``: ``{"title": ..., "source": ..., "config": {...}}``. Its ``config``
copies fields of the model's published ``config.json`` with the same names, values
and nesting (a multimodal model keeps its ``text_config``); fields the estimator
does not need, or that could not be checked, are left out rather than guessed. A
field's absence is therefore meaningful: Gemma-3's file, for instance, has no
``sliding_window_pattern`` and relies on the library default of 6. ``source`` is
the URL of the config.json (or model card) the numbers come from.

Each ``note`` (in the catalogues, attnviz/locales, ``[kv_presets.note]``) says what is special about the model's cache and how the numbers
were checked. "Cross-checked" means the fields were matched against verbatim
copies of the file embedded in public repositories (transformers/TensorRT-LLM/
Megatron-Bridge tests, inference engines' config fixtures), found by exact-string
search of stored GitHub sources; the Hugging Face file itself was not fetched.

Adding a preset: its JSON file here, its key in :data:`ORDER` (the menu's order), its title and note in the
catalogues. pyproject.toml's package data carries the files into a wheel.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from urllib.parse import urlparse

from attnviz.i18n.message import Text, msg

# the presets in the KV page's menu order, by family; each is presets/<key>.json
ORDER = (
    "gpt2",
    "llama-3-8b",
    "llama-3-70b",
    "llama-3.1-405b",
    "mistral-7b-v0.1",
    "mixtral-8x7b",
    "qwen2.5-7b",
    "qwen2.5-72b",
    "qwen3-32b",
    "qwen3-next-80b-a3b",
    "gemma-2-9b",
    "gemma-2-27b",
    "gemma-3-27b",
    "phi-3-mini-4k",
    "smollm2-1.7b",
    "falcon-7b",
    "falcon-40b",
    "deepseek-v2-lite",
    "deepseek-v3",
)
FIELDS = {"title", "source", "config"}  # what a preset file holds, no more, no less


@dataclass(frozen=True)
class Preset:
    """One model's config.json fields (read-only by convention: copy before editing) and their source."""

    key: str  # "llama-3-8b"
    title: str  # "Llama-3-8B (GQA 32/8)"
    config: dict  # the config.json fields, exactly as in the file
    source: str  # URL of the config.json (or model card)

    @property
    def note(self) -> Text:
        """What is special about the model's cache and how its numbers were checked (the catalogue holds it)."""
        try:
            return msg(f"kv_presets.note.{self.key}")
        except KeyError:
            return ""

    @property
    def shown_title(self) -> Text:
        """The title to show, from the catalogue where it has one (``title`` stays the English one)."""
        try:
            return msg(f"kv_presets.title.{self.key}")
        except KeyError:
            return self.title

    def __post_init__(self) -> None:
        url = urlparse(self.source)
        if url.scheme != "https" or not url.netloc:
            raise ValueError(f"preset {self.key!r}: source must be an https URL, got {self.source!r}")
        if not isinstance(self.config, dict) or "model_type" not in self.config:
            keys = sorted(self.config) if isinstance(self.config, dict) else type(self.config).__name__
            raise ValueError(f"preset {self.key!r}: config has no model_type (keys: {keys})")


def parse_preset(key: str, text: str) -> Preset:
    """A preset file's text as a :class:`Preset`; ValueError naming the preset when it is not one."""
    data = json.loads(text)
    if not isinstance(data, dict) or set(data) != FIELDS:
        found = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"preset {key!r}: a preset file holds exactly {sorted(FIELDS)}, not {found}")
    return Preset(key=key, title=data["title"], config=data["config"], source=data["source"])


def load_presets() -> dict[str, Preset]:
    """Every preset file of this package, in :data:`ORDER`; ValueError when a file and :data:`ORDER` disagree."""
    folder = resources.files(__name__)
    files = {entry.name.removesuffix(".json") for entry in folder.iterdir() if entry.name.endswith(".json")}
    if files != set(ORDER) or len(ORDER) != len(set(ORDER)):
        raise ValueError(f"preset files {sorted(files)} and ORDER {list(ORDER)} disagree")
    return {key: parse_preset(key, (folder / f"{key}.json").read_text(encoding="utf-8")) for key in ORDER}


PRESETS: dict[str, Preset] = load_presets()

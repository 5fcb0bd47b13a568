"""Where a model comes from, and what we agree to load from it.

A user names a bundled model ("minilm", "smollm2"), a local Hugging Face folder
or a hub id. Only safetensors are loaded: a pickled checkpoint can run arbitrary
code, so it is refused unless the caller explicitly allows it (the CLI's and the
server's ``--allow-pickle``), and ``trust_remote_code`` is never set.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path

from attnviz import settings
from attnviz.core.files import (
    PATH_SHOWN_CHARS,
    check_regular,
    folder_entries,
    kind_of,
    printable,
    read_bounded,
    shown_path,
)
from attnviz.errors import ModelUnavailableError, PathError
from attnviz.i18n.message import carried, msg
from attnviz.models.hf.bundled import (
    BUNDLED,
    Progress,
    converted_dir,
    is_converted,
    minilm_dir,
    prepared_folder,
    smollm2_gguf,
)
from attnviz.models.hf.config_sizes import least_params, oversized

__all__ = ["PATH_SHOWN_CHARS", "check_weights", "resolve_source", "shown_path"]

PICKLE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")


def check_weights(folder: Path, allow_pickle: bool) -> bool:
    """Whether to load safetensors (True) or an allowed pickle (False); refuse otherwise."""
    if any(folder.glob("*.safetensors")):
        return True
    pickles = sorted(p.name for pattern in PICKLE_PATTERNS for p in folder.glob(pattern))
    if not pickles:
        raise ModelUnavailableError(msg("model_errors.no_weights", folder=folder))
    if not allow_pickle:
        raise ModelUnavailableError(msg("model_errors.pickle_only", folder=folder, files=", ".join(pickles)))
    return False


TEXT_SUFFIXES = (".json", ".txt", ".model", ".jinja", ".tiktoken", ".vocab")  # configs, tokenizers, templates
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".msgpack", ".h5")


def _refused(err: PathError) -> ModelUnavailableError:
    return ModelUnavailableError(carried(err) or str(err))


def read_folder_config(folder: Path) -> dict:
    """A model folder's config.json as written, read once with its cap (a FIFO or a device refused, never waited
    on), and its sizes held to ``settings.MODEL_LIMITS`` before transformers reads it: its config classes act on
    their sizes as they are made (a list per layer), so 1,000,000,000 layers would hang ``AutoConfig`` itself."""
    name = printable(folder.name)
    try:
        data = read_bounded(folder / "config.json", settings.MODEL_CONFIG_MAX_BYTES)
    except PathError as err:
        raise _refused(err) from err
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        reason = " ".join(str(err).split())[:120]
        raise ModelUnavailableError(msg("model_files.bad_config", name=name, error=reason)) from err
    if not isinstance(raw, dict):
        raise ModelUnavailableError(msg("model_files.config_not_object", name=name, type=type(raw).__name__))
    too_big = oversized(raw)
    if too_big is not None:
        raise ModelUnavailableError(
            msg("model_errors.config_over", name=name, field=too_big.field, value=too_big.value, most=too_big.most)
        )
    return raw


def bundled_config(key: str) -> dict:
    """A bundled model's config.json object, read without loading it: MiniLM's config.json; SmolLM2's converted
    config.json, or its GGUF header's config when it has not been converted yet (no 20 s conversion just to read
    a config). ModelUnavailableError when its package is not installed or the file cannot be read."""
    if key == "minilm":
        return read_folder_config(minilm_dir())
    if key != "smollm2":
        raise KeyError(key)
    gguf = smollm2_gguf()
    folder = converted_dir(gguf)
    if is_converted(folder):
        return read_folder_config(folder)
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    with contextlib.redirect_stdout(None):
        return dict(load_gguf_checkpoint(str(gguf), return_tensors=False)["config"])


def check_folder_files(folder: Path, raw: dict, safetensors: bool) -> None:
    """Every file transformers may open in ``folder`` checked before it does: a regular file (symlinks followed;
    a FIFO, a device or a /proc file refused), configs and tokenizer files within their cap; and weights files
    that can hold the weights the config declares (``settings.MODEL_MIN_BYTES_PER_PARAM`` bytes for each of
    :func:`least_params`), so that no model is built far larger than what is on disk."""
    try:
        entries = folder_entries(folder, settings.MODEL_FOLDER_MAX_ENTRIES)
        weights_bytes = 0
        for entry in sorted(entries):
            suffix = entry.suffix.lower()
            if suffix in TEXT_SUFFIXES:
                check_regular(entry, settings.MODEL_TEXT_FILE_MAX_BYTES)
            elif suffix in WEIGHT_SUFFIXES:
                size = check_regular(entry)
                if (suffix == ".safetensors") == safetensors:
                    weights_bytes += size
    except PathError as err:
        raise _refused(err) from err
    params = least_params(raw)
    if params is not None and params * settings.MODEL_MIN_BYTES_PER_PARAM > weights_bytes:
        raise ModelUnavailableError(
            msg(
                "model_files.weights_too_small",
                name=printable(folder.name),
                params=params,
                size=weights_bytes,
            )
        )


def resolve_source(
    source: str,
    progress: Progress | None = None,
    allow_pickle: bool = False,
    before_weights: Callable[[Path], None] | None = None,
) -> tuple[str, str, bool]:
    """A user's model choice -> (what to pass to from_pretrained, display name, use_safetensors).

    A local folder is checked before transformers opens anything in it (:func:`read_folder_config`,
    :func:`check_folder_files`); every OS error on the path (too long, a link loop, permission denied) is one
    line naming it. ``before_weights(folder)`` then checks its config before its weights are looked for.
    """
    if source in BUNDLED:
        return str(prepared_folder(source, progress)), BUNDLED[source].title, True
    try:
        path = Path(source).expanduser()
    except RuntimeError as err:  # "~nosuchuser/..."
        raise ModelUnavailableError(msg("model_errors.no_folder_because", path=shown_path(source), error=err)) from err
    try:
        kind = kind_of(path)
        has_config = kind == "directory" and kind_of(path / "config.json") is not None
    except PathError as err:
        raise _refused(err) from err
    if kind is not None:
        if not has_config:
            raise ModelUnavailableError(msg("model_errors.not_hf_folder", source=shown_path(source)))
        raw = read_folder_config(path)  # config.json checked, capped and read: before_weights may parse it
        if before_weights is not None:
            before_weights(path)  # an architecture refused says why before its missing weights would
        safetensors = check_weights(path, allow_pickle)
        check_folder_files(path, raw, safetensors)
        return str(path.resolve()), printable(path.name), safetensors
    if source.startswith((".", "/", "~")) or source.count("/") > 1 or not source.strip():
        raise ModelUnavailableError(msg("model_errors.no_folder", path=shown_path(source)))
    return source, source, True  # a hub id: works with network access or a filled HF cache

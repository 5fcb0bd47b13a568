"""Where a model comes from, and what we agree to load from it.

A user names a bundled model ("minilm", "smollm2"), a local Hugging Face folder
or a hub id. Only safetensors are loaded: a pickled checkpoint can run arbitrary
code, so it is refused unless the caller explicitly allows it (the CLI's and the
server's ``--allow-pickle``), and ``trust_remote_code`` is never set.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from attnviz.errors import ModelUnavailableError
from attnviz.i18n.message import Text, msg
from attnviz.models.hf.bundled import BUNDLED, Progress, prepared_folder

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


PATH_SHOWN_CHARS = 80  # a path in a message is cut to this many characters, with its length said


def shown_path(source: str) -> Text | str:
    """A model path for a one-line message: quoted, and cut (its length said) when it is very long."""
    if len(source) <= PATH_SHOWN_CHARS:
        return repr(source)
    return msg("model_errors.path_cut", path=repr(source[: PATH_SHOWN_CHARS - 1]), n=len(source))


def resolve_source(
    source: str,
    progress: Progress | None = None,
    allow_pickle: bool = False,
    before_weights: Callable[[Path], None] | None = None,
) -> tuple[str, str, bool]:
    """A user's model choice -> (what to pass to from_pretrained, display name, use_safetensors).

    ``before_weights(folder)`` checks a local folder's config before its weights are looked for.
    """
    if source in BUNDLED:
        return str(prepared_folder(source, progress)), BUNDLED[source].title, True
    try:
        path = Path(source).expanduser()
        exists = path.exists()
    except RuntimeError as err:  # "~nosuchuser/..."
        raise ModelUnavailableError(msg("model_errors.no_folder_because", path=shown_path(source), error=err)) from err
    except (OSError, ValueError) as err:  # a name longer than the file system allows, a NUL byte
        reason = getattr(err, "strerror", None) or str(err)
        raise ModelUnavailableError(msg("model_errors.bad_path", path=shown_path(source), reason=reason)) from err
    if exists:
        if not path.is_dir() or not (path / "config.json").is_file():
            raise ModelUnavailableError(msg("model_errors.not_hf_folder", source=source))
        if before_weights is not None:
            before_weights(path)
        return str(path.resolve()), path.name, check_weights(path, allow_pickle)
    if source.startswith((".", "/", "~")) or source.count("/") > 1 or not source.strip():
        raise ModelUnavailableError(msg("model_errors.no_folder", path=repr(source)))
    return source, source, True  # a hub id: works with network access or a filled HF cache

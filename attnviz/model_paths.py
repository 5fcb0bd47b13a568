"""Where a model comes from, and what we agree to load from it.

A user names a bundled model ("minilm", "smollm2"), a local Hugging Face folder
or a hub id. Only safetensors are loaded: a pickled checkpoint can run arbitrary
code, so it is refused unless the caller explicitly allows it (the CLI's and the
server's ``--allow-pickle``), and ``trust_remote_code`` is never set.
"""

from __future__ import annotations

from pathlib import Path

from attnviz.bundled import BUNDLED, Progress, prepared_folder
from attnviz.source import ModelUnavailableError

PICKLE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")


def check_weights(folder: Path, allow_pickle: bool) -> bool:
    """Whether to load safetensors (True) or an allowed pickle (False); refuse otherwise."""
    if any(folder.glob("*.safetensors")):
        return True
    pickles = sorted(p.name for pattern in PICKLE_PATTERNS for p in folder.glob(pattern))
    if not pickles:
        raise ModelUnavailableError(f"{folder} has no model weights (*.safetensors)")
    if not allow_pickle:
        raise ModelUnavailableError(
            f"{folder} has only pickled weights ({', '.join(pickles)}); loading a pickle can run arbitrary code. "
            "Convert it to safetensors, or if you trust it, allow it on the command line with --allow-pickle."
        )
    return False


PATH_SHOWN_CHARS = 80  # a path in a message is cut to this many characters, with its length said


def shown_path(source: str) -> str:
    """A model path for a one-line message: quoted, and cut (its length said) when it is very long."""
    if len(source) <= PATH_SHOWN_CHARS:
        return repr(source)
    return f"{source[: PATH_SHOWN_CHARS - 1]!r}… ({len(source):,} characters)"


def resolve_source(source: str, progress: Progress | None = None, allow_pickle: bool = False) -> tuple[str, str, bool]:
    """A user's model choice -> (what to pass to from_pretrained, display name, use_safetensors)."""
    if source in BUNDLED:
        return str(prepared_folder(source, progress)), BUNDLED[source].title, True
    try:
        path = Path(source).expanduser()
        exists = path.exists()
    except RuntimeError as err:  # "~nosuchuser/..."
        raise ModelUnavailableError(f"no model folder at {shown_path(source)} ({err})") from err
    except (OSError, ValueError) as err:  # a name longer than the file system allows, a NUL byte
        reason = getattr(err, "strerror", None) or str(err)
        raise ModelUnavailableError(f"cannot use the model path {shown_path(source)}: {reason}") from err
    if exists:
        if not path.is_dir() or not (path / "config.json").is_file():
            raise ModelUnavailableError(f"{source} is not a Hugging Face model folder (it needs a config.json)")
        return str(path.resolve()), path.name, check_weights(path, allow_pickle)
    if source.startswith((".", "/", "~")) or source.count("/") > 1 or not source.strip():
        raise ModelUnavailableError(f"no model folder at {source!r}")
    return source, source, True  # a hub id: works with network access or a filled HF cache

"""The library functions the app's path boxes call (the KV page's folder box: ``load_config``; the sidebar's model
path: ``resolve_source``; the Mask lab and mask-doctor: ``read_mask_file``) raise the typed error the app's
``show_error`` renders, in one line, for every hostile path: never an OSError, a wait or an unbounded read."""

import os

import pytest

from attnviz.errors import ConfigError, MaskFileError, ModelUnavailableError
from attnviz.labs.kv.config import load_config
from attnviz.labs.masks.reading import read_mask_file
from attnviz.models.hf.paths import resolve_source

ENTRY_POINTS = [
    (load_config, ConfigError, ".json"),
    (resolve_source, ModelUnavailableError, ""),
    (read_mask_file, MaskFileError, ".npy"),
]


def hostile_paths(tmp_path, suffix: str) -> dict[str, tuple[str, str]]:
    """Each hostile path, and the end of the one line it must give."""
    fifo = tmp_path / f"fifo{suffix}"
    os.mkfifo(fifo)  # opened O_NONBLOCK and refused on fstat: never waited on, even in-process
    zero = tmp_path / f"zero{suffix}"
    zero.symlink_to("/dev/zero")
    loop = tmp_path / f"loop{suffix}"
    loop.symlink_to(loop)
    return {
        "long": ("/tmp/" + "x" * 100_000 + suffix, "the name is too long for the file system"),
        "loop": (str(loop), "too many levels of symbolic links (a link loop)"),
        "nul": ("/tmp/a\x00b" + suffix, "the name holds a NUL character"),
        "fifo": (str(fifo), "it is a FIFO (named pipe), not a regular file"),
        "zero": (str(zero), "it is a character device, not a regular file"),
    }


@pytest.mark.parametrize(("read", "error", "suffix"), ENTRY_POINTS)
def test_every_path_box_refuses_hostile_paths_in_one_line(tmp_path, read, error, suffix):
    for case, (path, said) in hostile_paths(tmp_path, suffix).items():
        if read is resolve_source and case in ("fifo", "zero"):
            continue  # a model path names a folder: a file there is "not a model folder" (below)
        with pytest.raises(error) as caught:
            read(path)
        text = str(caught.value)
        assert "\n" not in text and text.endswith(said) and len(text) < 250, (case, text)


def test_a_model_path_naming_a_device_is_not_a_model_folder(tmp_path):
    with pytest.raises(ModelUnavailableError, match=r"^'/dev/zero' is not a Hugging Face model folder"):
        resolve_source("/dev/zero")

"""Issue 19's hostile inputs, run as a user runs them: a child process with a time limit, so that a command that
waits on a FIFO or builds a billion-layer model fails the test instead of hanging the suite.

Every case: exit 2, stdout empty, exactly one line on stderr starting "attnviz <command>: error:".
"""

import json
import os
import time

import pytest

from attnviz.models.hf.bundled import minilm_dir
from tests.cli import attnviz

HANG_LIMIT_S = 60  # each answers in a few seconds on a busy 2-core machine (imports); a hang is what this catches
MINILM_FILES = ("config.json", "model.safetensors", "vocab.txt", "tokenizer.json", "tokenizer_config.json")


def refused(*args) -> str:
    start = time.monotonic()
    done = attnviz(*args, timeout=HANG_LIMIT_S)
    assert time.monotonic() - start < HANG_LIMIT_S
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and done.stdout == "" and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"attnviz {args[0]}: error: ") and "Traceback" not in done.stderr
    return lines[0]


def minilm_copy(folder):
    """A model folder of MiniLM's own files, linked: a real model under a name the test chooses."""
    folder.mkdir()
    for name in MINILM_FILES:
        (folder / name).symlink_to(minilm_dir() / name)
    return folder


def test_a_fifo_is_refused_at_once_by_every_command_that_reads_a_path(tmp_path):
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    assert refused("kv-cache", fifo).endswith(f"cannot read '{fifo}': it is a FIFO (named pipe), not a regular file")
    folder = tmp_path / "model"
    folder.mkdir()
    os.mkfifo(folder / "config.json")
    assert refused("kv-cache", folder).endswith("config.json': it is a FIFO (named pipe), not a regular file")
    assert refused("heads", "hi", "--model", folder).endswith("it is a FIFO (named pipe), not a regular file")
    mask = tmp_path / "m.npy"
    os.mkfifo(mask)
    assert refused("mask-doctor", mask).endswith(f"cannot read '{mask}': it is a FIFO (named pipe), not a regular file")


def test_a_model_whose_tokenizer_is_a_fifo_is_refused_before_transformers_opens_it(tmp_path):
    folder = minilm_copy(tmp_path / "m")
    (folder / "tokenizer.json").unlink()
    os.mkfifo(folder / "tokenizer.json")
    line = refused("scaling", "hi", "--model", folder, "--quiet")
    assert line.endswith("tokenizer.json': it is a FIFO (named pipe), not a regular file")


def test_a_billion_layers_is_refused_before_any_config_or_model_is_built(tmp_path):
    folder = minilm_copy(tmp_path / "big")
    config = json.loads((minilm_dir() / "config.json").read_text())
    (folder / "config.json").unlink()
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 10**9}))
    line = refused("heads", "hi", "--model", folder, "--quiet")
    assert line.endswith("big's config has num_hidden_layers = 1,000,000,000, over attnviz's limit of 10,000 "
                         "(settings.MODEL_LIMITS): no real model is that large")  # fmt: skip


def test_progress_lines_show_control_characters_in_the_model_name_as_escapes(tmp_path):
    folder = minilm_copy(tmp_path / "evil\nname\x1b[31m")
    done = attnviz("heads", "hi there", "--model", folder, "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stderr and "evil\\nname\\x1b[31m" in done.stderr
    assert any(line.startswith("[100%]") for line in done.stderr.splitlines())


def test_the_embedded_model_at_its_largest_is_over_the_budget_and_says_so_before_any_capture():
    line = refused(
        "heads", "a " * 9000, "--max-tokens", 8192, "--n-layer", 12, "--n-head", 64, "--d-model", 64, "--quiet"
    )  # fmt: skip
    # 8,192 x 12 x 64 head-tokens against SmolLM2's 8,192 x 30 x 9; 8,192^2 x 768 cells x 1e-8 s = 515 s
    assert "8,192 tokens x 12 layers x 64 heads = 6,291,456 head-tokens, over the request budget of 2,211,840" in line
    assert " GB and 515 s here); --max-tokens 2,880 or fewer fits, or pass --over-budget to run it anyway" in line


@pytest.mark.parametrize("command", ["heads", "scaling"])
def test_a_hundred_thousand_character_model_path_is_one_short_line(command):
    line = refused(command, "hi", "--model", "/tmp/" + "x" * 100_000, "--quiet")
    assert line.endswith("(100,005 characters): the name is too long for the file system") and len(line) < 250

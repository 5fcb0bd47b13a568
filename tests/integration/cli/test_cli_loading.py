"""stderr while a local folder model loads with a device map that offloads it to disk, as a user runs it: exactly the
lines docs/cli.md promises (attnviz's progress and its note on what went to disk; with --quiet, nothing), never
transformers' "Loading weights" bar, accelerate's "Some parameters are on the meta device" or their warnings."""

import json
import shutil

import pytest
import torch

from tests.cli import attnviz

TEXT = "The cat sat on the mat."


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A random tiny Llama with MiniLM's tokenizer (its vocabulary sizes the embedding)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from attnviz.models.hf.bundled import minilm_dir

    where = tmp_path_factory.mktemp("cli-loading") / "llama"
    sizes = {"vocab_size": 30528, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128}  # fmt: skip
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", **sizes)).save_pretrained(where)
    for file in minilm_dir().iterdir():
        if file.name.startswith(("tokenizer", "vocab", "special_tokens")):
            shutil.copy(file, where / file.name)
    return where


def on_disk(folder, tmp_path, *flags):
    """``heads`` with a CPU cap of 1 KiB: accelerate puts the whole model in the offload folder."""
    return attnviz("heads", TEXT, "--model", folder, "--json", "--device-map", "sequential", "--max-memory",
                   "cpu=1KiB", "--offload-folder", tmp_path / "weights", *flags, timeout=180)  # fmt: skip


def test_stderr_is_attnvizs_lines_and_the_note_on_what_went_to_disk(folder, tmp_path):
    proc = on_disk(folder, tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[:2] == ["[ 90%] Loading llama", "[100%] Loaded llama"]
    assert len(lines) == 3, lines  # no "Loading weights" bar, no "Some parameters are on the meta device"
    assert lines[2].startswith("attnviz heads: note: llama: ")
    assert "(100%, the whole model) are offloaded to disk and read back for every pass" in lines[2]
    assert json.loads(proc.stdout)["n_layer"] == 2


def test_quiet_leaves_stderr_empty(folder, tmp_path):
    proc = on_disk(folder, tmp_path, "--quiet")
    assert proc.returncode == 0 and proc.stderr == ""


def test_the_docs_small_test_model_recipe_runs(tmp_path):
    """docs/models.md's "A small test model of any architecture": its Python block builds a folder that the command
    it gives loads."""
    import re
    import subprocess
    import sys

    from tests.cli import ROOT

    text = (ROOT / "docs" / "models.md").read_text(encoding="utf-8")
    section = text.split("## A small test model of any architecture", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    command = re.search(r'python -m attnviz heads "([^"]+)" --model \./([\w-]+)', section)
    built = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    proc = attnviz("heads", command.group(1), "--model", tmp_path / command.group(2), "--json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["n_layer"] == 2 and result["n_head"] == 4 and "cat" in result["tokens"]

"""Hostile model folders and text: a one-line refusal (CLI exit 2, a clear st.error), never a traceback or a
silently wrong answer."""

import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers
from streamlit.testing.v1 import AppTest

from attnviz import cli
from attnviz.errors import ModelUnavailableError
from attnviz.models.hf.loading import load_hf_source
from attnviz.models.source import running
from tests.cli import ROOT, attnviz
from tests.integration.tiny_models import tiny


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory, smollm2) -> Path:
    return tiny(
        tmp_path_factory.mktemp("hostile") / "llama", smollm2, transformers.LlamaConfig, transformers.LlamaForCausalLM
    )


def variant(llama_folder: Path, tmp_path: Path, name: str, **config) -> Path:
    """A copy of the tiny folder with ``config`` written over its config.json."""
    folder = tmp_path / name
    shutil.copytree(llama_folder, folder)
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    return folder


def run_cli(capsys, *args) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"num_hidden_layers": 0}, "llama's config has num_hidden_layers = 0; it must be a whole number >= 1"),
        ({"num_attention_heads": -4}, "llama's config has num_attention_heads = -4; it must be a whole number >= 1"),
        (
            {"num_attention_heads": 3, "num_key_value_heads": 3},
            "The hidden size (64) is not a multiple of the number of attention heads (3)",
        ),
        ({"num_key_value_heads": 3}, "num_attention_heads must be a multiple of num_key_value_heads"),
    ],
)
def test_configs_that_cannot_run_are_refused_in_one_line(llama_folder, tmp_path, capsys, config, message):
    folder = variant(llama_folder, tmp_path, "llama", **config)
    code, out, err = run_cli(capsys, "heads", "hello world", "--model", folder, "--quiet")
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("attnviz heads: error: ") and message in err, err


def test_a_folder_without_tokenizer_files_is_refused(llama_folder, tmp_path, capsys):
    folder = tmp_path / "no-tokenizer"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(llama_folder / name, folder)
    code, _, err = run_cli(capsys, "heads", "hello world", "--model", folder, "--quiet")
    assert code == 2 and len(err.splitlines()) == 1
    assert "no-tokenizer has no tokenizer files (tokenizer.json, tokenizer.model, vocab.txt, vocab.json …)" in err


def test_mismatched_weights_are_refused_naming_the_first_tensor(llama_folder, tmp_path, capsys):
    folder = variant(llama_folder, tmp_path, "llama", intermediate_size=96)
    code, _, err = run_cli(capsys, "heads", "hello world", "--model", folder, "--quiet")
    assert code == 2 and len(err.splitlines()) == 1, err
    assert (
        "llama's checkpoint does not fit its config: model.layers.0.mlp.down_proj.weight is (64, 128) in the file "
        "but the config makes it (64, 96) (and 5 more)" in err
    )


def test_a_tokenizer_larger_than_the_embedding_is_refused(llama_folder, tmp_path):
    folder = tmp_path / "small-vocab"
    torch.manual_seed(0)
    config = transformers.LlamaConfig.from_pretrained(llama_folder)
    config.vocab_size = 1000
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(llama_folder / name, folder)
    with pytest.raises(ModelUnavailableError, match=r"tokenizer has 49,152 tokens but its embedding has 1,000 rows"):
        load_hf_source(str(folder))


def test_a_path_too_long_for_the_file_system_is_one_line(capsys):
    code, _, err = run_cli(capsys, "heads", "hello", "--model", "/" + "x" * 300, "--quiet")
    assert code == 2 and len(err.splitlines()) == 1
    assert err.strip().endswith(
        "…xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' (301 characters): the name is too long for the file system"
    ), err


def test_quiet_means_nothing_on_stderr_for_a_local_model(llama_folder):
    proc = attnviz("heads", "hello world", "--model", llama_folder, "--quiet")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_errors_while_the_model_runs_become_one_line(llama_folder, capsys, monkeypatch):
    source = load_hf_source(str(llama_folder))

    def broken(*args, **kwargs):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x64 and 32x64)\nmore detail")

    monkeypatch.setattr(source.model, "forward", broken)
    with pytest.raises(ModelUnavailableError, match=r"^llama failed while running: mat1 and mat2 shapes cannot be "):
        source.run("hello world", 16)
    with pytest.raises(ModelUnavailableError, match="llama failed while running"):
        source.generate("hello", 2, 16)
    monkeypatch.setattr("attnviz.cli.loading.load_cli_source", lambda args: source)
    code, _, err = run_cli(capsys, "heads", "hello world", "--model", llama_folder)
    assert (
        code == 2
        and err
        == "attnviz heads: error: llama failed while running: mat1 and mat2 shapes cannot be multiplied (4x64 and 32x64)\n"
    )


def test_programming_errors_are_not_turned_into_model_errors():
    with pytest.raises(TypeError), running("m"):
        raise TypeError("a bug of ours")


def test_typed_special_tokens_are_labelled_once(smollm2, minilm):
    bert = minilm.encode("a [UNK] b", 16).tokens
    assert [t.text for t in bert] == ["[CLS]", "a", "[UNK]", "b", "[SEP]"]
    assert bert[2].typed_special and not bert[2].unknown
    llama = smollm2.encode("a <|endoftext|> b", 16).tokens
    typed = [t for t in llama if t.typed_special]
    assert [t.text for t in typed] == ["<|endoftext|>"] and not typed[0].unknown
    assert minilm.encode("猫", 16).tokens[1].text == "猫[UNK]"  # an unknown character still says so


def test_invisible_characters_in_a_models_tokens_are_visible(smollm2):
    labels = [t.text for t in smollm2.encode("a\u202e(1/2)", 16).tokens]
    assert labels[:3] == ["a", "⟨U+202E⟩(1/2)", "⟨U+202E⟩(2/2)"]


def test_generated_byte_pieces_read_like_the_prompts(smollm2):
    from attnviz.core.token_display import generated_tokens

    ids = smollm2.tokenizer("它是猫", add_special_tokens=False)["input_ids"]
    tokens = generated_tokens(smollm2.tokenizer, ids, set(smollm2.tokenizer.all_special_ids))
    prompt = smollm2.encode("它是猫", 16).tokens
    assert [t.text for t in tokens] == [t.text for t in prompt]
    assert "�" not in "".join(t.text for t in tokens) and all(t.start == -1 for t in tokens)


def test_generation_record_uses_the_readable_labels(smollm2):
    gen = smollm2.generate("你好", 6, 64)
    assert "\ufffd" not in "".join(gen.labels())


# --- the command line: every numeric option bounded, every error one line --------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["heads", "hi there", "--seed", 2**64], "seed (18446744073709551616) must be from 0 to 4294967295"),
        (["scaling", "hi there", "--d-model", 10**30], "d_model (1000000000000000000000000000000) must be from 2"),
        (["heads", "hi there", "--n-layer", 0], "n_layer (0) must be from 1 to 12"),
        (["heads", "hi there", "--max-tokens", "x"], "argument --max-tokens: invalid int value: 'x'"),
        (["train-scale", "--seed", 2**64], "seed (18446744073709551616) must be from 0 to 4294967295"),
        (["train-scale", "--steps", 0], "steps (0) must be from 1 to 2000"),
        (["kv-cache", "minilm", "--batch", 10**30], "batch (1000000000000000000000000000000) must be a whole number"),
        (["kv-cache", "minilm", "--seq-len", 0], "seq_len (0) must be a whole number from 1"),
        (["bench", "--sdpa-tokens", -5], "--sdpa-tokens (-5) must be from 1 to 8192"),
        (["bench", "--capture-tokens", 10**20], "--capture-tokens (100000000000000000000) must be from 1 to 8192"),
        (["bench", "--threads", 0], "--threads (0) must be from 1 to 256"),
        (["mask-doctor", "m.npy", "--lengths", "99999999999999999999999"], "mask-doctor: error: "),
    ],
)
def test_every_numeric_option_is_bounded_in_one_line(capsys, args, message):
    try:
        code, out, err = run_cli(capsys, *args)
    except SystemExit as exit_:  # argparse's own errors exit from inside main
        code, captured = exit_.code, capsys.readouterr()
        out, err = captured.out, captured.err
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and message in err, err


def test_text_that_is_not_utf8_is_refused_in_one_line():
    proc = attnviz("heads", "caf\udce9")  # how Python hands over the byte 0xE9 of a latin-1 terminal
    assert proc.returncode == 2
    assert proc.stderr == (
        "attnviz heads: error: the text is not valid UTF-8 (byte 0xE9 at character 4); pass UTF-8 text "
        "(check the terminal's encoding, e.g. LANG=C.UTF-8)\n"
    )


def test_an_ascii_stdout_gets_escaped_json_and_text_with_a_notice():
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONIOENCODING": "ascii"}

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "attnviz", *args], capture_output=True, cwd=ROOT, env=env, timeout=300
        )

    proc = run("heads", "café 猫", "--json")
    assert proc.returncode == 0 and proc.stderr == b""
    assert json.loads(proc.stdout)["tokens"] == ["café", "猫"] and b"\\u732b" in proc.stdout
    proc = run("scaling", "café 猫", "--model", "default")
    assert proc.returncode == 0, proc.stderr
    help_ = run("--help")
    assert help_.returncode == 0 and help_.stderr == b""
    doctor = run("mask-doctor", "/nonexistent/猫.npy")
    assert doctor.returncode == 2 and len(doctor.stderr.splitlines()) == 1


# --- the app: a clear error, no traceback --------------------------------------------------------------------


def test_the_app_says_why_a_model_cannot_load_on_every_page(llama_folder, tmp_path):
    folder = variant(llama_folder, tmp_path, "**bold** llama", num_hidden_layers=0)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.selectbox(key="model").set_value("path").run()
    at.text_input(key="model_path").input(str(folder)).run()
    for page in ("pages/overview.py", "pages/heads.py", "pages/generation.py"):
        at.switch_page(page).run()
        assert not at.exception, page
        errors = at.error.values
        assert any(r"\*\*bold\*\* llama's config has num\_hidden\_layers = 0" in e for e in errors), (page, errors)
    at.text_input(key="model_path").input("/" + "x" * 300).run()
    assert not at.exception
    assert any("(301 characters): the name is too long for the file system" in e for e in at.error.values), (
        at.error.values
    )

"""``python -m attnviz kv-cache`` as other programs run it: the JSON contract, the bundled models, one-line errors."""

import io
import json
from pathlib import Path

import pytest

from attnviz import settings
from attnviz.cli import main
from tests.cli import attnviz
from tests.unit.labs.kv.real_configs import JAMBA_V01

ROOT = Path(__file__).resolve().parents[3]
KEYS = {"attention", "layers", "kv_heads", "head_dim", "bytes_per_token", "total_bytes", "per_layer", "window"}
MISTRAL = {
    "model_type": "mistral", "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
    "hidden_size": 512, "sliding_window": 100, "max_position_embeddings": 4096,
}  # fmt: skip


def kv_cache(*args):
    return attnviz("kv-cache", *args)


def as_json(*args):
    done = kv_cache(*args, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result) == KEYS
    return result


def test_smollm2_json():
    result = as_json("smollm2", "--seq-len", 1000, "--batch", 2)
    assert result["attention"] == "gqa"
    assert (result["layers"], result["kv_heads"], result["head_dim"], result["window"]) == (30, 3, 64, None)
    assert result["bytes_per_token"] == 30 * 3 * 64 * 2 * 2 == 23_040
    assert result["total_bytes"] == 2 * 1000 * 23_040 == sum(result["per_layer"])
    assert len(result["per_layer"]) == 30


def test_minilm_default_seq_len_is_capped_at_its_positions():
    result = as_json("minilm")
    assert (result["attention"], result["layers"], result["kv_heads"], result["head_dim"]) == ("mha", 6, 12, 32)
    assert result["total_bytes"] == 512 * result["bytes_per_token"]  # max_position_embeddings 512


def test_config_file_window_dtype_and_blocks(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MISTRAL))
    result = as_json(path, "--seq-len", 1000, "--dtype", "int8", "--block-size", 16)
    row = 64 + 2 * 4  # 64 int8 values, two groups of 32 with an fp16 scale and zero each
    assert result["window"] == 100 and result["bytes_per_token"] == 4 * 2 * 2 * row
    assert result["per_layer"] == [112 * 2 * 2 * row] * 4  # the window of 100 rounded up to 7 blocks
    folder = as_json(tmp_path, "--seq-len", 50)
    assert folder["total_bytes"] == 50 * folder["bytes_per_token"]
    assert as_json(path)["total_bytes"] == 4 * 100 * 2 * 2 * 64 * 2  # default seq_len 4096, window 100


def test_readable_table():
    done = kv_cache("smollm2", "--seq-len", 2048)
    assert done.returncode == 0, done.stderr
    for text in ("GQA", "23,040", "vLLM", "llama.cpp", "DynamicCache", "https://"):
        assert text in done.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not JSON"),
        ("[1, 2, 3]", "not an object"),
        (json.dumps({"num_attention_heads": 8, "hidden_size": 512}), "num_hidden_layers"),
        (json.dumps({**MISTRAL, "num_key_value_heads": -2}), "num_key_value_heads"),
        (" " * (settings.KV_CONFIG_MAX_BYTES + 1), "limit"),
    ],
)
def test_bad_files_exit_2_with_one_line(tmp_path, content, message):
    path = tmp_path / "config.json"
    path.write_text(content)
    done = kv_cache(path, "--json")
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args",
    [("missing.json",), ("smollm2", "--seq-len", "0"), ("smollm2", "--batch", "-1"), ("smollm2", "--dtype", "q9")],
)
def test_bad_arguments_exit_2_with_one_line(args):
    done = kv_cache(*args)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "attnviz kv-cache: error:" in done.stderr
    assert "Traceback" not in done.stderr


# `kv-cache jamba-v0.1/` as attnviz printed it when transformers' figure took a 4,096-token meta prefill through
# all 32 layers (over three minutes, most of it in the Mamba layers' token-by-token scan), and the line on the
# minimum beside transformers' figure added since (attnviz.labs.kv.agreement)
JAMBA_TEXT = (
    "jamba-v0.1: GQA, 32 layers (4 full, 28 linear), 32 query heads\n"
    "kv heads 8 x head_dim 128, window none\n"
    "batch 1 x seq_len 4,096, cache dtype bf16\n"
    "bytes per token (all layers, no window): 16,384\n"
    "minimum cache: 67,108,864 B (64.0 MiB)\n"
    "  linear   0 B (0.0 MiB)\n"
    "  full     67,108,864 B (64.0 MiB)\n"
    "what engines allocate:\n"
    "  vLLM                       67,108,864 B (64.0 MiB)\n"
    "    Per sequence, full layers hold ceil(seq_len / 16) blocks of 16 tokens, sliding layers hold (ceil(min(window - 1 + 8192, seq_len) / 16) + 1) blocks, MLA layers one latent row per token, linear/Mamba layers no KV. (https://github.com/vllm-project/vllm/blob/main/vllm/v1/kv_cache_interface.py)\n"
    "  llama.cpp                  67,108,864 B (64.0 MiB)\n"
    "    One stream per sequence (1): full layers hold PAD(seq_len, 256) cells, sliding layers PAD(min(that, n_swa + n_ubatch 512), 256), in bf16; MLA caches K as latent + rope and V as latent (GGUF key_length 576, value_length 512). (https://github.com/ggml-org/llama.cpp/blob/master/src/llama-kv-cache-iswa.cpp)\n"
    "  transformers DynamicCache  67,108,864 B (64.0 MiB)\n"
    "    Measured: a prefill of this batch and length run through the architecture's own transformers modeling code on the meta device (shapes only, no memory), and the DynamicCache it returned counted: every K, V (and indexer-key) tensor, not linear layers' recurrent state. (https://github.com/huggingface/transformers/blob/main/src/transformers/cache_utils.py)\n"
    "transformers' figure equals the minimum to the byte\n"
)


def test_a_hybrid_s_table_is_what_it_was_byte_for_byte(tmp_path):
    folder = tmp_path / "jamba-v0.1"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(JAMBA_V01))
    done = kv_cache(folder)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout == JAMBA_TEXT


def test_json_prints_no_engine_so_none_is_measured(tmp_path, monkeypatch, capsys):
    from attnviz.labs.kv import engines

    def refused(*args, **kwargs):
        raise AssertionError("--json measured transformers' cache, which it does not print")

    monkeypatch.setattr(engines, "engine_estimates", refused)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MISTRAL))
    assert main(["kv-cache", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total_bytes"] == 4 * 100 * 2 * 2 * 64 * 2


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [True, False])
def test_a_terminal_sees_what_kv_cache_is_doing_and_a_pipe_nothing(tmp_path, monkeypatch, capsys, terminal):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MISTRAL))
    stderr = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    assert main(["kv-cache", str(path), "--seq-len", "64"]) == 0
    assert "DynamicCache" in capsys.readouterr().out
    if terminal:  # one line while it works, erased before the answer
        assert stderr.getvalue() == "attnviz kv-cache: reading the config and measuring transformers' cache...\r\033[K"
    else:
        assert stderr.getvalue() == ""

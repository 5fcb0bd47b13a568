"""Hostile paths, configs and values on the command line (issue 19, A-D, L, M and the request budget): every one
is exit 2 with exactly one line on stderr, starting "attnviz", naming the path and the reason; never a traceback,
a hang or an unbounded read. The FIFO cases that could hang run as child processes in
tests/integration/cli/test_cli_paths.py; here only what cannot wait (stat and open with O_NONBLOCK never do)."""

import json
import os

import pytest

from attnviz import cli, settings
from attnviz.models.hf.bundled import minilm_dir

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 30522,
    "max_position_embeddings": 256,
}


def one_error_line(capsys, argv, code=2) -> str:
    assert cli.main([str(a) for a in argv]) == code
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == "" and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"attnviz {argv[0]}: error: "), lines[0]
    return lines[0]


def model_folder(folder, **config):
    """A model folder with MiniLM's tokenizer (linked), the config given and a small safetensors file."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir()
    for name in TOKENIZER_FILES:
        (folder / name).symlink_to(minilm_dir() / name)
    (folder / "config.json").write_text(json.dumps({**LLAMA, **config}))
    save_file({"model.embed_tokens.weight": torch.zeros(4, 4)}, folder / "model.safetensors")
    return folder


# ---- A, B, C: kv-cache


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_kv_cache_refuses_devices_and_json_links_to_them_in_one_line(tmp_path, capsys, device):
    link = tmp_path / "config.json"
    link.symlink_to(device)
    for path in (device, link, tmp_path):  # the folder's config.json is the link
        line = one_error_line(capsys, ["kv-cache", path])
        assert line.endswith("it is a character device, not a regular file"), line


def test_kv_cache_names_long_looping_and_missing_paths(tmp_path, capsys):
    long = "/tmp/" + "a" * 300 + ".json"
    line = one_error_line(capsys, ["kv-cache", long])
    assert line.endswith(f"({len(long)} characters): the name is too long for the file system")
    line = one_error_line(capsys, ["kv-cache", "/tmp/" + "a" * 100_000])
    assert "(100,005 characters): the name is too long" in line and len(line) < 250
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    assert one_error_line(capsys, ["kv-cache", loop]).endswith("too many levels of symbolic links (a link loop)")
    line = one_error_line(capsys, ["kv-cache", tmp_path / "missing.json"])
    assert line.endswith("is not a file, a model folder, minilm or smollm2")
    assert one_error_line(capsys, ["kv-cache", tmp_path]).endswith("has no config.json")
    (tmp_path / "proc.json").symlink_to("/proc/self/status")
    assert one_error_line(capsys, ["kv-cache", tmp_path / "proc.json"]).endswith("pseudo-file, not a regular file")


def test_kv_cache_reads_a_config_at_its_cap_and_refuses_one_byte_over(tmp_path, capsys):
    text = json.dumps(LLAMA)
    at_cap = tmp_path / "at.json"
    at_cap.write_text(text + " " * (settings.KV_CONFIG_MAX_BYTES - len(text)))
    assert cli.main(["kv-cache", str(at_cap), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["layers"] == 2
    over = tmp_path / "over.json"
    over.write_text(text + " " * (settings.KV_CONFIG_MAX_BYTES + 1 - len(text)))
    assert one_error_line(capsys, ["kv-cache", over]).endswith("it is larger than the limit of 1.0 MiB")


def test_kv_cache_refuses_a_billion_layers_before_transformers_reads_them(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "num_hidden_layers": 10**9}))
    line = one_error_line(capsys, ["kv-cache", path])
    assert "num_hidden_layers (1,000,000,000) is over attnviz's limit of 10,000" in line


# ---- mask-doctor


def test_mask_doctor_refuses_devices_loops_and_long_names(tmp_path, capsys):
    link = tmp_path / "m.npy"
    link.symlink_to("/dev/zero")
    assert one_error_line(capsys, ["mask-doctor", link]).endswith("it is a character device, not a regular file")
    loop = tmp_path / "loop.npy"
    loop.symlink_to(loop)
    assert one_error_line(capsys, ["mask-doctor", loop]).endswith("(a link loop)")
    long = "/tmp/" + "a" * 300 + ".npy"
    assert one_error_line(capsys, ["mask-doctor", long]).endswith("the name is too long for the file system")


# ---- C, D: heads / scaling --model


@pytest.mark.parametrize("command", ["heads", "scaling"])
def test_a_model_path_the_file_system_refuses_is_one_line(tmp_path, capsys, command):
    long = "/tmp/" + "m" * 300
    line = one_error_line(capsys, [command, "hi there", "--model", long, "--quiet"])
    assert line.endswith(f"({len(long)} characters): the name is too long for the file system")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    assert one_error_line(capsys, [command, "hi", "--model", loop, "--quiet"]).endswith("(a link loop)")


def test_a_model_folder_whose_files_are_devices_is_refused_before_transformers_opens_them(tmp_path, capsys):
    folder = model_folder(tmp_path / "m")
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer.json").symlink_to("/dev/zero")
    line = one_error_line(capsys, ["heads", "hi", "--model", folder, "--quiet"])
    assert line.endswith(f"cannot read '{folder / 'tokenizer.json'}': it is a character device, not a regular file")
    (folder / "config.json").unlink()
    (folder / "config.json").symlink_to("/dev/urandom")
    assert one_error_line(capsys, ["heads", "hi", "--model", folder, "--quiet"]).endswith("not a regular file")


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ({"num_hidden_layers": 10**9}, "num_hidden_layers = 1,000,000,000, over attnviz's limit of 10,000"),
        ({"num_attention_heads": 10**9}, "num_attention_heads = 1,000,000,000, over attnviz's limit of 4,096"),
        ({"intermediate_size": 10**12}, "intermediate_size = 1,000,000,000,000, over attnviz's limit of 1,048,576"),
        ({"vocab_size": 10**10}, "vocab_size = 10,000,000,000, over attnviz's limit of 4,194,304"),
        # within every limit, but 10,000 x (2 x 4,096^2) + 30,522 x 4,096 = 335,669,338,112 weights against 160 bytes
        (
            {"num_hidden_layers": 10_000, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8},
            "declares at least 335,669,338,112 weights, but its weights files hold",
        ),
    ],
)
def test_an_absurd_config_is_refused_before_any_model_is_built(tmp_path, capsys, config, said):
    folder = model_folder(tmp_path / "absurd", **config)
    line = one_error_line(capsys, ["heads", "hi", "--model", folder, "--quiet"])
    assert said in line, line


# ---- L, M


def test_no_command_is_one_usage_line_and_exit_2(capsys):
    assert cli.main([]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("attnviz: error: no command given; usage: python -m attnviz {heads,compare,scaling,ablate,")


def test_what_stderr_echoes_of_a_typed_value_is_escaped(tmp_path, capsys):
    evil = "/tmp/no\nsuch\x1b[31mmodel"
    line = one_error_line(capsys, ["heads", "hi", "--model", evil])
    assert "'/tmp/no\\nsuch\\x1b[31mmodel'" in line and "\x1b" not in line
    with pytest.raises(SystemExit) as exited:  # argparse's own errors: the unrecognized argument is echoed
        cli.main(["kv-cache", "--seq-len", "1", "x", "\x1b[2Jextra"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1
    assert err == "attnviz kv-cache: error: unrecognized arguments: \\x1b[2Jextra\n"


# ---- the request budget


def test_over_the_request_budget_is_exit_2_with_its_numbers_unless_asked(monkeypatch, capsys):
    monkeypatch.setattr(settings, "REQUEST_HEAD_TOKENS", 40)  # 6 tokens x 2 layers x 4 heads = 48 > 40
    argv = ["heads", "a b c d e f", "--quiet", "--json"]
    line = one_error_line(capsys, argv)
    assert "this request reads 6 tokens x 2 layers x 4 heads = 48 head-tokens, over the request budget of 40" in line
    assert line.endswith("--max-tokens 5 or fewer fits, or pass --over-budget to run it anyway")
    assert cli.main([*argv, "--max-tokens", "5"]) == 0  # 40: at the budget is within it
    assert len(json.loads(capsys.readouterr().out)["tokens"]) == 5
    assert cli.main([*argv, "--over-budget"]) == 0
    assert len(json.loads(capsys.readouterr().out)["tokens"]) == 6
    assert one_error_line(capsys, ["scaling", "a b c d e f", "--quiet"]).endswith("to run it anyway")


def test_the_flag_is_in_the_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["heads", "--help"])
    assert "--over-budget" in capsys.readouterr().out


def test_a_path_error_from_a_library_is_not_a_traceback(capsys, monkeypatch):
    def broken(_args):
        raise OSError(os.strerror(5))

    parser = cli.build_parser
    monkeypatch.setattr(cli, "build_parser", lambda: _with_kv(parser(), broken))
    assert one_error_line(capsys, ["kv-cache", "x"]) == "attnviz kv-cache: error: Input/output error"


def _with_kv(parser, func):
    sub = next(action for action in parser._actions if action.dest == "command")
    sub.choices["kv-cache"].set_defaults(func=func)
    return parser


def test_a_config_whose_estimate_fields_are_strings_is_sized_not_a_traceback(tmp_path, capsys):
    # the fuzz helper's finding: MiniLM's shape with "type_vocab_size": "2" (the weight estimate's fields)
    config = {"model_type": "bert", "architectures": ["BertModel"], "num_hidden_layers": 2, "num_attention_heads": 4,
              "hidden_size": 32, "intermediate_size": 64, "vocab_size": 30522, "max_position_embeddings": 512,
              "type_vocab_size": "2", "moe_intermediate_size": [1], "first_k_dense_replace": 1.5}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert cli.main(["kv-cache", str(tmp_path), "--seq-len", "10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bytes_per_token"] == 2 * 2 * 4 * 8 * 2  # layers, K+V, heads, dim, bf16

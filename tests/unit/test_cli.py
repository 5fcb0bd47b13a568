"""The command line's shape: its subcommands, one line on stderr for bad input, and a JSON contract kept."""

import json

import pytest

from attnviz import cli
from tests.cli import SUBCOMMANDS


def test_every_subcommand_is_offered():
    parser = cli.build_parser()
    sub = next(action for action in parser._actions if action.dest == "command")
    assert list(sub.choices) == SUBCOMMANDS


def test_no_subcommand_is_exit_2_with_the_usage_on_stderr(capsys):
    assert cli.main([]) == 2
    out, err = capsys.readouterr()
    assert not out and "usage:" in err and all(name in err for name in SUBCOMMANDS)


def test_kv_cache_prints_exactly_its_json_keys(tmp_path, capsys):
    config = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "hidden_size": 64, "max_position_embeddings": 128}))
    assert cli.main(["kv-cache", str(path), "--seq-len", "10", "--dtype", "fp16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    keys = ["attention", "layers", "kv_heads", "head_dim", "bytes_per_token", "total_bytes", "per_layer", "window"]
    assert list(out) == keys
    assert (
        out["attention"] == "gqa" and out["bytes_per_token"] == 2 * 2 * 2 * 16 * 2
    )  # layers, K and V, heads, dim, fp16
    assert (
        out["total_bytes"] == 10 * out["bytes_per_token"] and out["per_layer"] == [1280, 1280] and out["window"] is None
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["kv-cache", "/no/such/config.json"],
        ["mask-doctor", "/no/such/mask.npy"],
        ["heads", ""],
        ["kv-cache", "x", "--batch", "0"],
    ],
)
def test_bad_input_is_exit_2_with_one_line_on_stderr(argv, capsys):
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1 and err.startswith(f"attnviz {argv[0]}")


@pytest.mark.slow
def test_an_ablation_sweep_over_its_time_budget_is_exit_2_with_its_numbers(capsys, monkeypatch):
    # the prediction is timed on this machine: any sweep is over 0 s
    monkeypatch.setattr(cli.ablate, "SWEEP_BUDGET_S", 0.0)
    # 48 heads, 16 a pass: timing runs the first pass and the last (resumed), so one pass is left to price
    argv = ["ablate", "the cat sat on the mat " * 60, "--heads", "all", "--n-layer", "6", "--n-head", "8"]
    assert cli.main([*argv, "--quiet"]) == 2
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1
    assert "the sweep ablates 48 heads one at a time on 256 tokens, about " in err and "--over-budget" in err
    assert cli.main([*argv, "--quiet", "--over-budget", "--json"]) == 0


def test_an_ablation_sweep_says_its_predicted_time_first(capsys):
    assert cli.main(["ablate", "the cat sat", "--heads", "all", "--json"]) == 0
    out, err = capsys.readouterr()
    assert "the sweep: 8 heads on 3 tokens, about " in err  # the embedded default: 2 layers x 4 heads
    value = json.loads(out)
    assert len(value["sweep"]) == 2 and all(len(row) == 4 for row in value["sweep"])
    assert value["heads"] == [[layer, head] for layer in range(2) for head in range(4)]

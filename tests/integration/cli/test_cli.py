"""The command line, run as a user runs it: a subprocess, stdout, stderr and the exit code."""

import json
import math

import pytest

from attnviz import __version__
from attnviz.core.devices import available_devices
from tests.cli import attnviz

MISSING_DEVICE = next(d for d in ("cuda", "mps") if d not in available_devices())


def run(*args):
    return attnviz(*args)


def test_version():
    proc = run("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"attnviz {__version__}"


def test_heads_json():
    proc = run("heads", "The cat sat. 猫坐着 👍", "--json", "--n-layer", "3", "--n-head", "2", "--d-model", "16")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["tokens"] == ["The", "cat", "sat", ".", "猫", "坐", "着", "👍"]
    assert out["n_layer"] == 3 and out["n_head"] == 2
    assert len(out["stats"]) == 6
    first = out["stats"][0]
    assert {"layer", "head", "entropy", "max_weight", "first_token_weight"} <= set(first)
    assert (first["layer"], first["head"]) == (0, 0)
    assert 0 <= first["entropy"] <= math.log(8) + 1e-6


def test_heads_table_and_truncation():
    proc = run("heads", "a b c d e", "--max-tokens", "3")
    assert proc.returncode == 0
    assert "truncated from 5 tokens" in proc.stdout


@pytest.mark.parametrize(
    "args,reason",
    [
        (["heads", "   "], "text is empty"),
        (["heads", "hi", "--d-model", "10", "--n-head", "3"], "d_model (10) must be divisible by n_head (3)"),
        (["heads", "hi", "--max-tokens", "0"], "--max-tokens (0) must be from 1 to 8192"),
        (["heads", "hi", "--max-tokens", "8193"], "--max-tokens (8193) must be from 1 to 8192"),
        (["heads", "hi", "--n-layer", "0"], "n_layer (0) must be from 1 to 12"),
        (["heads", "hi", "--device", MISSING_DEVICE], f"device '{MISSING_DEVICE}' is not available here"),
        (["heads", "hi", "--device", "cuda:7"], "device 'cuda:7' is not available here"),
        (["heads", "hi", "--device", "gpu"], "device must be one of auto, cpu, cuda, mps, cuda:N, not 'gpu'"),
        (["heads", "hi", "--dtype", "float64"], "argument --dtype: invalid choice: 'float64'"),
        (["heads", "hi", "--max-memory", "cpu=1GiB"], "give a device map too"),
        (["heads", "hi", "--offload-folder", "off"], "give a device map too"),
        (["heads", "hi", "--device-map", "auto"], "the embedded model runs on one device"),
        (["ablate", "hi", "--device-map", "sideways"], "argument --device-map: invalid choice: 'sideways'"),
        (["scaling", "hi", "--max-memory", "cpu=lots"], "argument --max-memory: a memory size is a number"),
        ([], "usage"),
    ],
)
def test_errors_exit_nonzero_with_a_reason_and_no_traceback(args, reason):
    proc = run(*args)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert reason in proc.stderr
    assert proc.stderr.strip()


@pytest.mark.parametrize("model,shape", [("minilm", (6, 12, 12)), ("smollm2", (30, 9, 3))])
def test_heads_with_a_bundled_model_and_parity(model, shape):
    # on the CPU: the same kernels as the model's own attention, so exact (another device: tests/tolerances.py)
    proc = run("heads", "The cat sat on the mat.", "--model", model, "--parity", "--json", "--quiet", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["n_layer"], out["n_head"], out["n_kv_head"]) == shape
    assert out["parity_max_abs_diff"] == 0.0 and out["parity_tokens"] == len(out["tokens"])
    assert len(out["stats"]) == shape[0] * shape[1]
    assert "attnviz.capture" in out["implementation"]


def test_long_text_keeps_every_key_and_one_stats_object_per_head():
    text = "The cat sat on the mat because it was tired. 注意力机制让每个词都能看到句子里的其他词。 " * 120
    proc = run("heads", text, "--model", "smollm2", "--max-tokens", "2048", "--json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert len(out["tokens"]) == 2048 and out["truncated"] and out["n_input_tokens"] > 2048
    assert set(out) == {
        "model",
        "implementation",
        "tokens",
        "n_input_tokens",
        "truncated",
        "n_layer",
        "n_head",
        "n_kv_head",
        "causal",
        "stats",
    }
    assert len(out["stats"]) == 30 * 9 and all(0 < s["entropy"] < 8 for s in out["stats"])
    # the first token is SmolLM2's attention sink in its later layers
    assert any("sink" in s["flags"] for s in out["stats"] if s["layer"] > 10)


def test_the_embedded_model_in_bfloat16_agrees_with_float32_within_its_tolerance():
    """The same seeded weights in bfloat16 (8 bits of mantissa): statistics accumulated in float32 stay within
    0.05 nats of entropy and 0.02 of a weight of the float32 run's."""
    text = "The cat sat on the mat because it was tired, and then it slept for a while."
    runs = {dtype: json.loads(run("heads", text, "--json", "--dtype", dtype).stdout) for dtype in ("auto", "bfloat16")}
    full, low = runs["auto"]["stats"], runs["bfloat16"]["stats"]
    assert runs["auto"]["tokens"] == runs["bfloat16"]["tokens"] and len(full) == len(low) == 2 * 4
    assert max(abs(a["entropy"] - b["entropy"]) for a, b in zip(full, low, strict=True)) < 0.05
    assert max(abs(a["max_weight"] - b["max_weight"]) for a, b in zip(full, low, strict=True)) < 0.02
    assert full != low  # it really ran in bfloat16


def test_parity_on_the_embedded_model_says_why_there_is_none():
    out = json.loads(run("heads", "hi there", "--parity", "--json").stdout)
    assert out["parity_max_abs_diff"] is None and "embedded" in out["parity_note"]


def test_unknown_model_path_is_a_clear_error():
    proc = run("heads", "hi", "--model", "/no/such/model")
    assert proc.returncode == 2 and "no model folder at '/no/such/model'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_train_scale_json_keeps_its_contract_and_shows_the_stuck_loss(default_training):
    assert default_training["returncode"] == 0, default_training["stderr"]
    out = json.loads(default_training["stdout"])
    assert set(out) == {"runs"}
    runs = {r["scale"]: r for r in out["runs"]}
    assert list(runs) == ["sqrt_dk", "none", "sqrt_dmodel"]
    for r in runs.values():
        assert set(r) == {"scale", "final_loss", "final_accuracy", "losses", "seconds"}
        assert len(r["losses"]) == 300 and r["seconds"] > 0
    assert runs["sqrt_dk"]["final_accuracy"] >= 0.9
    assert runs["none"]["final_loss"] > runs["sqrt_dk"]["final_loss"]  # without the scale the loss gets stuck
    assert runs["sqrt_dmodel"]["final_loss"] > runs["sqrt_dk"]["final_loss"]


def test_train_scale_errors_are_one_line():
    proc = run("train-scale", "--steps", "0")
    assert (
        proc.returncode == 2 and proc.stderr.strip() == "attnviz train-scale: error: steps (0) must be from 1 to 2000"
    )

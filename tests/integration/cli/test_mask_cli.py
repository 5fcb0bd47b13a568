"""``python -m attnviz mask-doctor`` as other programs run it: the JSON contract, the exit codes, one-line errors."""

import io
import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from attnviz.core.masks import causal_mask, padding_mask
from tests.cli import attnviz

ROOT = Path(__file__).resolve().parents[3]
CAUSAL = causal_mask(4).numpy()


def doctor(*args):
    return attnviz("mask-doctor", *args)


def assert_one_line_error(proc, reason):
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnviz mask-doctor: error: "), proc.stderr
    assert reason in lines[0]


def test_a_correct_mask_exits_0_with_exactly_the_contract_keys(tmp_path):
    path = tmp_path / "causal.npy"
    np.save(path, CAUSAL)
    proc = doctor(path, "--expect", "causal", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out == {"ok": True, "convention": "keep", "shape": [4, 4], "problems": []}


def test_a_leak_exits_1_with_examples(tmp_path):
    path = tmp_path / "leak.pt"
    leaky = torch.from_numpy(CAUSAL).clone()
    leaky[0, 2] = leaky[1, 3] = True
    torch.save(leaky, path)
    proc = doctor(path, "--expect", "causal", "--json")
    assert proc.returncode == 1
    out = json.loads(proc.stdout)
    assert list(out) == ["ok", "convention", "shape", "problems"] and out["ok"] is False
    assert out["problems"] == [{"kind": "future_leak", "count": 2, "examples": [[0, 2], [1, 3]]}]
    assert "Traceback" not in proc.stderr and "future_leak" in proc.stderr

    proc = doctor(path, "--expect", "causal")  # the readable report
    assert proc.returncode == 1
    assert "PROBLEM future_leak (2 cells)" in proc.stdout and "[0, 2] [1, 3]" in proc.stdout


def test_a_batched_additive_mask_with_lengths(tmp_path):
    keep = torch.from_numpy(CAUSAL) & padding_mask([4, 2], 4, side="left")[:, 0, 0][:, None, :]  # (2, 4, 4)
    keep[:, torch.arange(4), torch.arange(4)] = True  # pad rows keep themselves: no NaN row
    path = tmp_path / "batch.safetensors"
    from safetensors.torch import save_file

    save_file({"mask": torch.zeros(2, 4, 4).masked_fill(~keep, float("-inf"))}, path)
    proc = doctor(path, "--expect", "causal+padding", "--lengths", "4,2", "--side", "left", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout) == {"ok": True, "convention": "additive", "shape": [2, 4, 4], "problems": []}
    proc = doctor(path, "--expect", "causal+padding", "--lengths", "4,2", "--json")  # the wrong side
    assert proc.returncode == 1
    assert {p["kind"] for p in json.loads(proc.stdout)["problems"]} >= {"over_masked"}


def test_a_block_mask_read_as_keep_and_the_convention_flag(tmp_path):
    path = tmp_path / "block.csv"
    path.write_text("\n".join(",".join(str(int(not v)) for v in row) for row in CAUSAL) + "\n")
    proc = doctor(path, "--expect", "causal", "--json")
    assert proc.returncode == 1 and [p["kind"] for p in json.loads(proc.stdout)["problems"]] == ["inverted"]
    proc = doctor(path, "--expect", "causal", "--convention", "block", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["convention"] == "block"


def test_a_wrong_shape_is_a_problem_exit_1_with_json(tmp_path):
    path = tmp_path / "single.npy"
    np.save(path, CAUSAL)
    proc = doctor(path, "--expect", "causal+padding", "--lengths", "4,2", "--json")
    assert proc.returncode == 1
    out = json.loads(proc.stdout)
    (problem,) = out["problems"]
    assert out["ok"] is False and {k: problem[k] for k in ("kind", "count", "examples")} == {
        "kind": "bad_shape",
        "count": 1,
        "examples": [],
    }
    assert problem["reason"] == "sequences" and "holds 1 sequence but the lengths 4,2 give 2" in problem["detail"]


def test_a_key_mask_over_documents_that_do_not_add_up_is_bad_shape_exit_1(tmp_path):
    """Issue 25: a (1, T) mask read without --q-len, with documents that do not add up to T, exited 2."""
    path = tmp_path / "keys.npy"
    np.save(path, np.ones((1, 8), dtype=bool))
    for documents in ("5,3,4", "99999999999999999999"):
        proc = doctor(path, "--expect", f"documents:{documents}", "--json")
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "bad_shape" in proc.stderr
        (problem,) = json.loads(proc.stdout)["problems"]
        assert problem["kind"] == "bad_shape" and problem["reason"] == "documents_total"
    proc = doctor(path, "--expect", "documents:٥,3")  # an Arabic-Indic five: not a number here, as in --heads
    assert proc.returncode == 2 and not proc.stdout and "give whole numbers" in proc.stderr


class RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_hostile_and_broken_files_exit_2_with_one_line(tmp_path):
    pickled = tmp_path / "pickled.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert_one_line_error(doctor(pickled), "pickled data is not accepted")

    marker = tmp_path / "pwned"
    malicious = tmp_path / "malicious.pt"
    torch.save(RunsCode(marker), malicious)
    assert_one_line_error(doctor(malicious, "--expect", "causal"), "Python objects other than tensors")
    assert not marker.exists()

    raw_pickle = tmp_path / "raw.pt"
    raw_pickle.write_bytes(pickle.dumps(RunsCode(marker)))  # not even a torch archive
    assert_one_line_error(doctor(raw_pickle), "not a torch.save archive")
    assert not marker.exists()

    corrupt = tmp_path / "corrupt.npy"
    buffer = io.BytesIO()
    np.save(buffer, CAUSAL)
    corrupt.write_bytes(buffer.getvalue()[:-6])
    assert_one_line_error(doctor(corrupt), "truncated")

    unknown = tmp_path / "mask.txt"
    unknown.write_text("1,0\n1,1\n")
    assert_one_line_error(doctor(unknown), "unsupported extension (.txt)")

    huge = tmp_path / "huge.npy"
    with huge.open("wb") as f:
        f.truncate(9 * 2**20)  # sparse: over the 8 MiB limit, refused before a byte is read
    assert_one_line_error(doctor(huge), "a mask file may be at most 8.0 MiB")

    assert_one_line_error(doctor(tmp_path / "missing.npy"), "no such file")


@pytest.mark.parametrize(
    "args,reason",
    [
        (["--expect", "sliding"], "sliding needs a whole number"),
        (["--expect", "causal", "--lengths", "4,x"], "--lengths '4,x'"),
        (["--expect", "padding"], "needs the real length of each sequence"),
        (["--side", "up"], "invalid choice: 'up'"),
        (["--no-such-flag"], "unrecognized arguments"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(tmp_path, args, reason):
    path = tmp_path / "causal.npy"
    np.save(path, CAUSAL)
    assert_one_line_error(doctor(path, *args), reason)


def test_convention_on_a_float_mask_is_an_error(tmp_path):
    path = tmp_path / "additive.npy"
    np.save(path, np.where(CAUSAL, 0.0, -np.inf))
    assert_one_line_error(doctor(path, "--convention", "keep"), "a float mask is additive")


def test_decode_steps_chunks_and_packed_documents_as_other_programs_see_them(tmp_path):
    from attnviz.core.masks import document_mask

    step = tmp_path / "step.npy"
    np.save(step, causal_mask(1, 8).numpy())
    proc = doctor(step, "--expect", "causal", "--q-len", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"ok": True, "convention": "keep", "shape": [1, 8], "problems": [], "offset": 7}

    chunk = tmp_path / "chunk.pt"
    torch.save(causal_mask(3, 8, offset=6), chunk)  # offset one too large
    proc = doctor(chunk, "--expect", "causal")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    # rows named by their position (the step's rows 0 and 1 are the text's tokens 5 and 6), as in the message
    assert "PROBLEM future_leak (2 cells)" in proc.stdout and "[5, 6] [6, 7]" in proc.stdout
    assert "query 5 → key 6" in proc.stdout

    leaky = document_mask([5, 3, 4])
    leaky[5, 4] = True
    packed = tmp_path / "packed.csv"
    packed.write_text("\n".join(",".join(str(int(v)) for v in row) for row in leaky.tolist()) + "\n")
    proc = doctor(packed, "--expect", "documents:5,3,4", "--json")
    assert proc.returncode == 1
    out = json.loads(proc.stdout)
    assert out["problems"] == [{"kind": "cross_document", "count": 1, "examples": [[5, 4]], "documents": [[1, 0]]}]
    assert out["documents"] == [5, 3, 4]

    proc = doctor(packed, "--expect", "documents:5,3", "--json")  # a readable mask of no fitting shape: exit 1
    assert proc.returncode == 1 and json.loads(proc.stdout)["problems"][0]["kind"] == "bad_shape"
    assert proc.stderr.strip() == "attnviz mask-doctor: problems found: bad_shape"

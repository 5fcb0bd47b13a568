"""``mask-doctor`` on decode steps, chunks and packed documents, run in-process: JSON, the report, exit codes."""

import json

import numpy as np
import pytest
import torch

from attnviz import cli
from attnviz.core.masks import causal_mask, document_mask


def run(capsys, path, *args):
    try:
        code = cli.main(["mask-doctor", str(path), *map(str, args)])
    except SystemExit as stopped:  # argparse's own errors exit from inside the parser
        code = stopped.code
    out, err = capsys.readouterr()
    return code, out, err


def saved(tmp_path, name, mask):
    path = tmp_path / name
    np.save(path, mask.numpy())
    return path


def test_a_decode_step_passes_with_q_len_1_and_was_a_key_mask_without(tmp_path, capsys):
    path = saved(tmp_path, "step.npy", causal_mask(1, 8))
    code, out, _ = run(capsys, path, "--expect", "causal", "--q-len", "1", "--json")
    assert code == 0 and json.loads(out) == {
        "ok": True,
        "convention": "keep",
        "shape": [1, 8],
        "problems": [],
        "offset": 7,
    }
    code, out, _ = run(capsys, path, "--expect", "causal", "--offset", "7", "--json")
    assert code == 0 and json.loads(out)["offset"] == 7
    code, out, err = run(capsys, path, "--expect", "causal")  # read as a key mask, as before, with a hint
    assert code == 1 and "PROBLEM future_leak (28 cells)" in out and "--q-len 1" in out and "future_leak" in err


def test_the_off_by_one_offset_names_its_cells(tmp_path, capsys):
    path = saved(tmp_path, "chunk.npy", causal_mask(3, 8, offset=6))
    code, out, err = run(capsys, path, "--expect", "causal", "--json")
    assert code == 1 and "future_leak" in err
    report = json.loads(out)
    assert list(report) == ["ok", "convention", "shape", "problems", "offset"]
    assert report["problems"] == [{"kind": "future_leak", "count": 2, "examples": [[0, 6], [1, 7]]}]
    assert report["offset"] == 5 and report["shape"] == [3, 8]
    code, out, _ = run(capsys, path, "--expect", "causal")
    assert code == 1
    # the text names queries by position (row 0 of the step is position 5), as the message does; --json keeps rows
    assert "PROBLEM future_leak (2 cells)" in out and "examples [q, k]: [5, 6] [6, 7]" in out
    assert "(e.g. query 5 → key 6)" in out
    assert "note: Read as 3 query rows at positions 5 to 7 of 8 keys" in out and "causal with offset 6, not 5" in out


def test_chunks_bottom_right_pass_top_left_fail(tmp_path, capsys):
    right = saved(tmp_path, "right.npy", causal_mask(3, 8))
    assert run(capsys, right, "--expect", "causal")[0] == 0
    left = saved(tmp_path, "left.npy", torch.ones(3, 8, dtype=torch.bool).tril())
    code, out, _ = run(capsys, left, "--expect", "causal", "--json")
    problems = json.loads(out)["problems"]
    assert code == 1 and [p["kind"] for p in problems] == ["missing_self", "over_masked"]
    assert problems[0]["examples"] == [[0, 5], [1, 6], [2, 7]] and problems[1]["count"] == 12
    assert run(capsys, left, "--expect", "causal", "--offset", "0")[0] == 0
    wide = saved(tmp_path, "wide.npy", causal_mask(4, 7))  # no offset given: bottom-right
    code, out, _ = run(capsys, wide, "--expect", "causal", "--json")
    assert code == 0 and json.loads(out)["offset"] == 3


def test_packed_documents_pass_and_a_leak_is_cross_document(tmp_path, capsys):
    good = saved(tmp_path, "docs.npy", document_mask([5, 3, 4]))
    code, out, _ = run(capsys, good, "--expect", "documents:5,3,4", "--json")
    assert code == 0 and json.loads(out) == {
        "ok": True,
        "convention": "keep",
        "shape": [12, 12],
        "problems": [],
        "documents": [5, 3, 4],
    }
    leaky = document_mask([5, 3, 4])
    leaky[5, 4] = True
    path = saved(tmp_path, "leak.npy", leaky)
    code, out, err = run(capsys, path, "--expect", "documents:5,3,4", "--json")
    assert code == 1 and "cross_document" in err
    assert json.loads(out)["problems"] == [
        {"kind": "cross_document", "count": 1, "examples": [[5, 4]], "documents": [[1, 0]]}
    ]
    code, out, _ = run(capsys, path, "--expect", "documents:5,3,4")
    assert code == 1 and "PROBLEM cross_document (1 cells)" in out and "[5, 4]" in out
    assert "documents (query→key): 1→0" in out and "expected: documents:5,3,4" in out


@pytest.mark.parametrize(
    ("mask", "args", "said", "reason"),
    [
        (document_mask([5, 3, 4]), ["--expect", "documents:5,3"], "add up to 8 tokens", "documents_total"),
        (torch.ones(8, 4, dtype=torch.bool), ["--expect", "causal"], "more queries (8) than keys (4)", "more_queries"),
        (causal_mask(8), ["--q-len", "1"], "holds 8 query rows", "q_len"),
        (causal_mask(3, 8), ["--offset", "7"], "beyond its 8 keys", "offset"),
        # a (1, T) key mask read without --q-len: its documents are checked too (issue 25: it was exit 2)
        (torch.ones(1, 8, dtype=torch.bool), ["--expect", "documents:5,3,4"], "add up to 12 tokens", "documents_total"),
        (
            torch.ones(1, 8, dtype=torch.bool),
            ["--expect", "documents:99999999999999999999"],
            "8 keys",
            "documents_total",
        ),
        (torch.ones(8, 1, dtype=torch.bool), [], "broadcast over the keys", "broadcast_axis"),
        (torch.ones(2, 8, 8, dtype=torch.bool), ["--lengths", "5"], "holds 2 sequences", "sequences"),
        (torch.ones(8, 8, dtype=torch.bool), ["--lengths", "9"], "shorter than the longest", "short"),
    ],
)
def test_a_readable_mask_of_no_fitting_shape_is_bad_shape_exit_1(tmp_path, capsys, mask, args, said, reason):
    path = saved(tmp_path, "mask.npy", mask)
    code, out, err = run(capsys, path, *args, "--json")
    (problem,) = json.loads(out)["problems"]
    assert code == 1 and problem["kind"] == "bad_shape" and problem["count"] == 1 and problem["examples"] == []
    assert problem["reason"] == reason and said in problem["detail"]  # which mismatch, for a script too
    assert "bad_shape" in err
    code, out, _ = run(capsys, path, *args)
    assert code == 1 and said in out and "PROBLEM bad_shape:" in out


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--q-len", "x"], "argument --q-len: invalid int value"),
        (["--q-len", "٣"], "argument --q-len: invalid int value: '٣'"),  # ASCII digits only, as --heads
        (["--offset", "1_0"], "argument --offset: invalid int value"),
        (["--expect", "documents:٥,3"], "give whole numbers separated by commas"),
        (["--expect", "sliding:٣"], "sliding needs a whole number"),
        (["--lengths", "٨"], "--lengths '٨': give whole numbers"),
        (["--offset", "-1"], "offset must be a whole number >= 0"),
        (["--q-len", "0"], "q_len must be a whole number >= 1"),
        (["--expect", "documents:5,0"], "every length must be at least 1"),
        (["--expect", "documents"], "--expect documents"),
        (["--expect", "documents:4,4", "--lengths", "8"], "does not go with --lengths"),
        (["--expect", "casual"], "documents:L1,L2"),
    ],
)
def test_bad_arguments_stay_exit_2_with_one_line(tmp_path, capsys, args, reason):
    path = saved(tmp_path, "mask.npy", causal_mask(8))
    code, out, err = run(capsys, path, *args)
    assert code == 2 and not out and err.count("\n") == 1 and reason in err, err


def test_an_unreadable_file_stays_exit_2(tmp_path, capsys):
    path = tmp_path / "broken.npy"
    path.write_bytes(b"\x93NUMPY garbage")
    code, out, err = run(capsys, path, "--expect", "documents:5,3,4", "--q-len", "1")
    assert code == 2 and not out and err.count("\n") == 1 and "not a valid .npy file" in err

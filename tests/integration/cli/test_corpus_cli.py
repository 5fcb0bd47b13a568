"""``attnviz corpus`` as a user runs it: a subprocess on a small corpus, its JSON, Ctrl-C mid-run then --resume
equal to an unbroken run, and bad input refused in one stderr line (exit 2)."""

import json
import signal
import subprocess
import sys

import pandas as pd
import pytest

from attnviz.labs.corpus.store import CorpusRun
from tests.cli import ROOT, attnviz

SMALL = ["--n-layer", "2", "--n-head", "2", "--d-model", "16", "--causal"]  # the embedded model, small and exact
JSON_KEYS = {"out", "model", "texts_done", "texts_total", "tokens_done", "seconds", "stopped", "routes"}


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    """Tiny passes: torch's pool of a thread per core would only spin on shared cores (as under xdist)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def corpus_file(tmp_path, n):
    words = ["the", "cat", "sat", "on", "a", "mat", "while", "one", "dog", "ran", "far", "away", "from", "home"]
    lines = [" ".join(words[(i + j) % len(words)] for j in range(2 + i % 11)) for i in range(n)]
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def rows(folder):
    return CorpusRun.open(folder).heads().sort_values(["text_id", "layer", "head"]).reset_index(drop=True)


def test_a_small_corpus_on_minilm(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["A cat.", "", "Two dogs ran home.", "猫坐着"]))
    proc = attnviz("corpus", path, "--model", "minilm", "--out", tmp_path / "out", "--json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result) == JSON_KEYS
    assert result["texts_done"] == result["texts_total"] == 3 and result["stopped"] is False
    assert len(result["routes"]) == 6 and result["model"].startswith("MiniLM")
    heads = rows(tmp_path / "out")
    assert sorted(heads["text_id"].unique()) == [0, 2, 3] and len(heads) == 3 * 6 * 12
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["tokens_done"] == result["tokens_done"] == int(heads.groupby("text_id").n_tokens.first().sum())
    assert len(summary["heads"]) == 72 and summary["heads"][0]["n_texts"] == 3
    assert len(summary["probe"]) == 72  # the induction probe's rows, once per run


def test_ctrl_c_mid_run_then_resume_equals_an_unbroken_run(tmp_path):
    path = corpus_file(tmp_path, 80)
    common = ["corpus", path, "--batch-tokens", "8", *SMALL]
    whole = attnviz(*common, "--out", tmp_path / "whole", "--quiet")
    assert whole.returncode == 0, whole.stderr
    child = subprocess.Popen(
        [sys.executable, "-m", "attnviz", *map(str, common), "--out", tmp_path / "broken", "--json"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stderr.readline().startswith("[corpus] ")  # the first batch is written
    child.send_signal(signal.SIGINT)
    stdout, stderr = child.communicate(timeout=120)
    assert child.returncode == 130, stderr
    stopped = json.loads(stdout)
    assert stopped["stopped"] is True and stopped["texts_total"] is None and 0 < stopped["texts_done"] < 80
    said = [line for line in stderr.splitlines() if not line.startswith("[corpus] ")]
    assert said == [f"attnviz corpus: stopped after {stopped['texts_done']:,} texts; --resume goes on from there"]
    resumed = attnviz(*common, "--out", tmp_path / "broken", "--resume", "--json", "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["texts_done"] == 80
    pd.testing.assert_frame_equal(rows(tmp_path / "broken"), rows(tmp_path / "whole"))


def one_line_error(proc, reason):
    assert proc.returncode == 2 and not proc.stdout
    assert len(proc.stderr.splitlines()) == 1 and reason in proc.stderr, proc.stderr


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    path = corpus_file(tmp_path, 3)
    out = tmp_path / "out"
    one_line_error(attnviz("corpus", tmp_path / "absent.txt", "--out", out), "absent.txt: no such file")
    one_line_error(attnviz("corpus", path, "--out", out, "--limit", "0"), "--limit must be 1 or more, not 0")
    one_line_error(attnviz("corpus", path, "--out", out, "--max-tokens", "0"), "--max-tokens (0) must be from 1")
    one_line_error(attnviz("corpus", path), "the following arguments are required: --out")
    (tmp_path / "c.csv").write_text("id,body\n1,x\n")
    one_line_error(attnviz("corpus", tmp_path / "c.csv", "--out", out), 'no "text" column (its columns: id, body)')
    (tmp_path / "c.bin").write_bytes(b"\x00\x01\x02")
    one_line_error(attnviz("corpus", tmp_path / "c.bin", "--out", out), "a binary file, not text")
    assert not out.exists()
    out.mkdir()
    (out / "mine.txt").write_text("x")
    one_line_error(attnviz("corpus", path, "--out", out), "is not empty; pass --resume")
    one_line_error(attnviz("corpus", path, "--out", out, "--resume"), "holds no corpus run (no run.json)")


@pytest.mark.parametrize("change,reason", [(["--max-tokens", "7"], "its max_tokens is 256, not 7")])
def test_resume_refuses_a_folder_holding_a_different_run(tmp_path, change, reason):
    path = corpus_file(tmp_path, 3)
    assert attnviz("corpus", path, "--out", tmp_path / "out", "--quiet", *SMALL).returncode == 0
    one_line_error(attnviz("corpus", path, "--out", tmp_path / "out", "--resume", "--quiet", *SMALL, *change), reason)

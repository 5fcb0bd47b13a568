"""A bug of attnviz's on the command line: one line on stderr saying it is attnviz's, exit 70, the traceback only
with ATTNVIZ_TRACEBACK=1; the model's failure and out of memory stay one line with exit 2. No model is loaded: a
subcommand is replaced by a pass that fails."""

import pytest
import torch

from attnviz import cli, settings
from attnviz.core.attention import attention_scores
from attnviz.models.source import running


def command_failing_with(failure):
    def command(args):
        with running("tiny", "cpu"):
            failure()
        return 0

    return command


def attnviz_index_error():
    attention_scores(torch.zeros(1, 1, 2, 4), torch.zeros(4), 1.0)  # attnviz's own code: k has no head axis


def models_error():
    raise RuntimeError("the model's own failure")


def models_oom():
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity ...")


def run(monkeypatch, capsys, failure, *, traceback: bool = False):
    monkeypatch.setattr(cli.kv_cache, "kv_cache_command", command_failing_with(failure))
    if traceback:
        monkeypatch.setenv(settings.TRACEBACK_ENV, "1")
    else:
        monkeypatch.delenv(settings.TRACEBACK_ENV, raising=False)
    code = cli.main(["kv-cache", "config.json"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_bug_in_attnviz_is_one_line_saying_so_exit_70_and_no_traceback(monkeypatch, capsys):
    code, out, err = run(monkeypatch, capsys, attnviz_index_error)
    assert code == cli.BUG_EXIT == 70 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("attnviz kv-cache: error: a bug in attnviz (at attnviz/core/attention.py:")
    assert "IndexError: tuple index out of range; please report it (ATTNVIZ_TRACEBACK=1 prints" in err
    assert "failed while running" not in err


def test_the_traceback_goes_to_stderr_only_when_asked(monkeypatch, capsys):
    code, _, err = run(monkeypatch, capsys, attnviz_index_error, traceback=True)
    lines = err.splitlines()
    assert code == 70 and lines[0].startswith("Traceback") and "in attention_scores" in err
    assert lines[-1].startswith("attnviz kv-cache: error: a bug in attnviz") and lines[-1].endswith("report it")


def test_an_error_no_command_expected_is_a_bug_too(monkeypatch, capsys):
    monkeypatch.setattr(cli.kv_cache, "kv_cache_command", lambda args: {}["missing"])
    monkeypatch.delenv(settings.TRACEBACK_ENV, raising=False)
    code = cli.main(["kv-cache", "config.json"])
    err = capsys.readouterr().err
    assert code == 70 and err.count("\n") == 1 and "KeyError: 'missing'" in err and "a bug in attnviz" in err


@pytest.mark.parametrize(
    ("failure", "line"),
    [
        (models_error, "attnviz kv-cache: error: tiny failed while running: the model's own failure\n"),
        (models_oom, "attnviz kv-cache: error: out of memory on cuda:1: 2.00 GiB asked"),
    ],
)
def test_the_models_failure_and_out_of_memory_stay_one_line_exit_2(monkeypatch, capsys, failure, line):
    code, _, err = run(monkeypatch, capsys, failure)
    assert code == 2 and err.startswith(line) and err.count("\n") == 1 and "bug" not in err

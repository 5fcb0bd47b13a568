"""``attnviz patch --positions``: a value that is not one LAYER.HEAD is one line on stderr and exit 2, before any
model is loaded (a head the model lacks is tested in tests/integration/cli/test_patch_cli.py)."""

import pytest

from attnviz import cli


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("9", "--positions"),
        ("9.*", "--positions takes one head"),
        ("9.4,1.2", "--positions takes one head"),
        ("x.y", "--positions"),
        ("", "--positions"),
        ("9.4" * 500, "--positions"),
    ],
)
def test_a_positions_value_that_is_not_one_head_is_one_line(capsys, monkeypatch, value, words):
    from attnviz.cli import loading

    def no_model(args):
        raise AssertionError("the model was loaded before --positions was read")

    monkeypatch.setattr(loading, "load_cli_source", no_model)
    code = cli.main(["patch", "a b", "a c", "--model", "smollm2", "--metric", "loss", "--positions", value])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert words in err and len(err) < 400, err

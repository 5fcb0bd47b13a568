"""``attnviz patch``: its JSON keys, the estimate with its top heads confirmed, and one line with exit 2 for each
input it cannot take (a metric token that splits names how)."""

import json

import pytest

from attnviz import cli

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
KEYS = {"model", "tokens", "metric", "clean", "corrupt", "effects", "estimate"}


def run(capsys, *argv) -> tuple[int, str, str]:
    try:
        code = cli.main(["patch", *argv])
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_json_contract(capsys):
    code, out, err = run(
        capsys,
        CLEAN,
        CORRUPT,
        "--model",
        "smollm2",
        "--metric",
        "logit-diff: Mary, John",
        "--heads",
        "9.*,20.7",
        "--json",
        "--quiet",
    )
    assert code == 0, err
    value = json.loads(out)
    assert set(value) == KEYS
    assert value["metric"] == "logit-diff: Mary, John" and value["estimate"] is None
    assert value["tokens"][-1] == " to" and value["clean"] > value["corrupt"]  # each token's own text (issue 37)
    assert value["tokens"][:4] == ["When", " Mary", " and", " John"]
    assert len(value["effects"]) == 30 and all(len(row) == 9 for row in value["effects"])
    ran = [(layer, head) for layer, row in enumerate(value["effects"]) for head, v in enumerate(row) if v is not None]
    assert ran == [(9, h) for h in range(9)] + [(20, 7)]


def test_the_estimate_is_confirmed(capsys):
    code, out, err = run(
        capsys,
        CLEAN,
        CORRUPT,
        "--model",
        "smollm2",
        "--metric",
        "logit-diff: Mary, John",
        "--heads",
        "0.0",
        "--estimate",
        "--json",
        "--quiet",
    )
    assert code == 0, err
    value = json.loads(out)
    estimate = value["estimate"]
    assert len(estimate["values"]) == 30 and len(estimate["confirmed"]) == 10
    assert estimate["passes"].startswith("1 forward + 1 backward")
    for spec in estimate["confirmed"]:  # each of the estimate's top heads was run exactly
        layer, head = map(int, spec.split("."))
        assert value["effects"][layer][head] is not None
    assert estimate["agreement"]["k"] == 10 and estimate["agreement"]["n_heads"] == 11
    code, out, err = run(capsys, CLEAN, CORRUPT, "--model", "smollm2", "--metric", "kl", "--heads", "3.1", "--quiet")
    assert code == 0 and "fraction restored" in out and "kl" in out


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            ["--metric", "logit-diff:Marylebone,John"],
            "'Marylebone' is not one token: it encodes to 3 ('Mary' + 'le' + 'bone')",
        ),
        (["--metric", "logit-diff: Mary"], "does not name two tokens"),
        (["--metric", "accuracy"], "unknown metric"),
        (["--metric", "loss", "--heads", "30.0"], "does not exist"),
        (["--metric", "loss", "--heads", "x"], "is not a head"),
        (["--metric", "loss", "--heads", "0.0", "--positions", "30.0"], "head 30.0 does not exist"),
        (["--metric", "loss", "--heads", "0.0", "--positions", "0.9"], "head 0.9 does not exist"),
    ],
)
def test_bad_input_is_one_line(capsys, argv, words):
    code, _, err = run(capsys, CLEAN, CORRUPT, "--model", "smollm2", "--quiet", *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert words in err, err


def test_texts_it_cannot_patch(capsys):
    for clean, corrupt, words in (
        (CLEAN, "When Mary and John went", "patching needs the same length"),
        (CLEAN, "   ", "the corrupted text is empty"),
        ("", CORRUPT, "the text is empty"),
        (CLEAN, CLEAN, "nothing to restore"),
    ):
        code, _, err = run(capsys, clean, corrupt, "--model", "smollm2", "--metric", "loss", "--quiet")
        assert code == 2 and len(err.strip().splitlines()) == 1 and words in err, err
    code, _, err = run(capsys, "a cat", "a dog", "--model", "minilm", "--metric", "loss", "--quiet")
    assert code == 2 and "no LM head" in err
    code, _, err = run(capsys, "a cat", "a dog", "--metric", "kl", "--quiet")  # the embedded model: no LM head either
    assert code == 2 and "no LM head" in err
    code, _, err = run(capsys, CLEAN, CORRUPT)  # --metric is required
    assert code == 2 and "--metric" in err


def test_positions_add_one_key_and_leave_the_rest_as_it_was(capsys):
    """``--positions 23.3``: the name mover patched at one position at a time, under an added ``positions`` key; every
    other key is what the same command prints without it. The positions before the swapped name restore nothing
    (their z is the same in both texts); the readable report quotes each token, its leading space seen."""
    argv = [CLEAN, CORRUPT, "--model", "smollm2", "--metric", "logit-diff: Mary, John", "--heads", "23.3", "--quiet"]
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    plain = json.loads(out)
    code, out, err = run(capsys, *argv, "--json", "--positions", "23.3")
    assert code == 0, err
    value = json.loads(out)
    assert set(value) == KEYS | {"positions"}
    positions = value.pop("positions")
    assert value == plain
    assert set(positions) == {"head", "values", "fractions"} and positions["head"] == "23.3"
    assert len(positions["fractions"]) == len(positions["values"]) == len(value["tokens"]) == 14
    assert all(v == 0 for v in positions["fractions"][:9]), positions["fractions"]  # rounded to the JSON's digits
    assert max(positions["fractions"], key=abs) == positions["fractions"][-1]  # where the name mover reads names
    code, out, err = run(capsys, *argv, "--positions", "23.3")
    assert code == 0, err
    lines = out.splitlines()
    at = lines.index("head 23.3 patched at one position at a time, fraction restored:")
    assert lines[at + 2].startswith("     1 ' Mary': ") and len(lines) == at + 15

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
    assert value["tokens"][-1] == "to" and value["clean"] > value["corrupt"]  # as heads --json shows tokens
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

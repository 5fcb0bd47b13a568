"""Issue 37: the command line shows each token as the model read it, its leading space kept (" Mary", not "Mary"):
``heads --json`` and ``ablate`` (its JSON, and its readable report, where the token is quoted so the space is
seen), on SmolLM2, whose byte-level tokens hold the space before a word. (``patch`` and ``logits``: their own
tests.)"""

import json

from attnviz import cli

TEXT = "When Mary and John went to the store"
READ = ["When", " Mary", " and", " John", " went", " to", " the", " store"]


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_heads_json_keeps_each_tokens_leading_space(capsys):
    code, out, err = run(capsys, "heads", TEXT, "--model", "smollm2", "--json", "--quiet")
    assert code == 0, err
    assert json.loads(out)["tokens"] == READ


def test_ablate_keeps_each_tokens_leading_space(capsys):
    code, out, err = run(capsys, "ablate", TEXT, "--model", "smollm2", "--heads", "0.0", "--json", "--quiet")
    assert code == 0, err
    assert json.loads(out)["tokens"] == READ
    code, out, err = run(capsys, "ablate", TEXT, "--model", "smollm2", "--heads", "0.0", "--quiet")
    assert code == 0, err
    changed = next(line for line in out.splitlines() if line.startswith("changed most: "))
    shown = [part.split(" ", 1)[1].rsplit(" ", 1)[0] for part in changed.removeprefix("changed most: ").split(", ")]
    assert shown and all(token in {repr(t) for t in READ} for token in shown), changed
    assert any(token.startswith("' ") for token in shown), changed  # a word's leading space, seen in its quotes

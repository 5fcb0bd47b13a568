"""``attnviz logits``'s arguments, parsed without a model: --token's text kept as typed (spaces too), --position an
integer that may count from the end, both optional."""

import pytest

from attnviz import cli


def parsed(*argv):
    return cli.build_parser().parse_args(["logits", *argv])


def test_the_defaults_leave_the_token_and_position_to_the_model():
    args = parsed("the cat")
    assert args.text == "the cat" and args.token is None and args.position is None and not args.json
    assert args.model == "default" and args.func.__module__ == "attnviz.cli.logits"


def test_a_token_keeps_its_spaces_and_a_position_may_be_negative():
    args = parsed("the cat", "--token", " Mary", "--position", "-2", "--json", "--model", "smollm2")
    assert args.token == " Mary" and args.position == -2 and args.json and args.model == "smollm2"


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["the cat", "--position", "1.5"], "invalid int value"),
        (["the cat", "--position"], "expected one argument"),
        ([], "the following arguments are required: text"),
        (["   ", "--quiet"], "the text is empty"),
        (["the cat", "--token", "", "--quiet"], "--token is empty"),
    ],
)
def test_bad_arguments_are_one_line_before_any_model_loads(capsys, argv, words):
    try:
        code = cli.main(["logits", *argv])
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and words in err, err

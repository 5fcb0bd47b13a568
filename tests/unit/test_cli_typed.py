"""What a user types into an option, read strictly and the same way everywhere: every whole number in ASCII digits
(``int()`` also reads "٥", "1_000", "+5" and " 5", which ``--heads`` refuses), every string checked for bytes that
are not UTF-8 as the main text is. Each is refused in one line on stderr with exit 2, before any model loads."""

import pytest

from attnviz import cli
from attnviz.core.devices import parse_max_memory

NOT_NUMBERS = [
    "٥",
    "1_000",
    "+5",
    " 5",
    "5 ",
    "５",
    "²",
    "5.0",
]  # Arabic-Indic, underscores, a sign, spaces, full-width
NUMBER_OPTIONS = [  # (argv before the value, the option)
    (["heads", "The cat."], "--max-tokens"),
    (["heads", "The cat."], "--seed"),
    (["heads", "The cat."], "--n-layer"),
    (["heads", "The cat."], "--generate"),
    (["compare", "a", "b"], "--seed-b"),
    (["logits", "a"], "--position"),
    (["train-scale"], "--steps"),
    (["kv-cache", "smollm2"], "--batch"),
    (["mask-doctor", "mask.npy"], "--offset"),
    (["bench"], "--threads"),
]


def run(capsys, *argv):
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("typed", NOT_NUMBERS)
@pytest.mark.parametrize(("before", "option"), NUMBER_OPTIONS)
def test_a_number_is_ascii_digits_only(capsys, before, option, typed):
    with pytest.raises(SystemExit) as exit_:
        cli.main([*before, f"{option}={typed}"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1
    assert f"argument {option}: invalid int value: {typed!r}" in err


@pytest.mark.parametrize(("typed", "value"), [("5", 5), ("0", 0), ("-2", -2), ("007", 7)])
def test_a_number_in_ascii_digits_is_read(typed, value):
    args = cli.build_parser().parse_args(["logits", "a", "--position", typed, "--max-tokens", typed])
    assert args.position == value and args.max_tokens == value  # a range check, not the parser, refuses -2 tokens


@pytest.mark.parametrize("size", ["٥GiB", "+5GiB", "1_000", "５MB", "1.٥GiB"])
def test_a_memory_size_is_ascii_digits_only(capsys, size):
    with pytest.raises(ValueError, match="a memory size is a number"):
        parse_max_memory(f"cpu={size}")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["heads", "a", "--max-memory", f"cpu={size}"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "a memory size is a number" in err


@pytest.mark.parametrize("device", ["٠", "²", "+0"])
def test_a_gpu_in_max_memory_is_ascii_digits_only(device):
    with pytest.raises(ValueError, match="max memory is a list of device=size"):
        parse_max_memory(f"{device}=1GiB")


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["heads", "The cat.", "--target", "caf\udce9"], "--target is not valid UTF-8 (byte 0xE9 at character 4)"),
        (
            ["patch", "The cat sat", "The dog sat", "--metric", "logit-diff:\udcff,a"],
            "--metric is not valid UTF-8 (byte 0xFF at character 12)",
        ),
        (["patch", "The cat sat", "The dog\udcff", "--metric", "loss"], "the corrupted text is not valid UTF-8"),
        (["ablate", "The cat", "--heads", "0.\udcb0"], "--heads is not valid UTF-8 (byte 0xB0 at character 3)"),
        (["logits", "The cat", "--token", "\udce9"], "--token is not valid UTF-8"),
        (["compare", "a", "b\udcff"], "TEXT_B is not valid UTF-8"),
        (["mask-doctor", "m.npy", "--expect", "documents:\udcff"], "--expect is not valid UTF-8"),
        (["heads", "caf\udce9"], "the text is not valid UTF-8 (byte 0xE9 at character 4)"),  # as it always was
    ],
)
def test_every_string_that_is_not_utf8_is_one_line_exit_2(capsys, argv, line):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith(f"attnviz {argv[0]}: error: {line}") and err.count("\n") == 1


def test_a_path_may_hold_any_bytes(capsys):
    """A file name is bytes on POSIX: a path option is the OS's to read, not refused as text."""
    code, _, err = run(capsys, "mask-doctor", "/nonexistent/m\udcff.npy")
    assert code == 2 and "not valid UTF-8" not in err and "no such file" in err

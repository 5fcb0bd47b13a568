"""The errors a user can fix: one line, English by str() (the CLI's), each carrying its message for the app."""

import math

import pytest

from attnviz import errors
from attnviz.i18n.message import Message, carried


@pytest.mark.parametrize(
    ("err", "line"),
    [
        (RuntimeError("shape mismatch\n  at layer 3"), "shape mismatch"),
        (ValueError(""), "ValueError"),
        (ValueError("1 validation error for X:\n  field required"), "1 validation error for X: field required"),
        (OSError("  \n  disk full  "), "disk full"),
        (KeyError("attnviz"), "KeyError: 'attnviz'"),  # Falcon's load used to say just 'attnviz'
    ],
)
def test_first_line_is_one_line_joining_an_announcement_with_its_reason(err, line):
    assert errors.first_line(err) == line


def test_every_user_error_is_a_value_or_runtime_error_so_pages_catch_them_by_kind():
    assert issubclass(errors.ModelUnavailableError, RuntimeError)
    for cls in (errors.ConfigError, errors.MaskFileError, errors.ExportTooLargeError, errors.ParityUnsupportedError):
        assert issubclass(cls, ValueError)


def test_the_training_cap_says_its_numbers_and_keeps_them():
    err = errors.TrainingCapError(used_s=100.0, needed_s=45.0, wait_s=math.inf, cap_s=120.0, window_s=3600.0)
    assert (err.used_s, err.needed_s, err.wait_s, err.cap_s, err.window_s) == (100.0, 45.0, math.inf, 120.0, 3600.0)
    message = carried(err)
    assert isinstance(message, Message) and message.values["cap"] == 120.0 and message.values["minutes"] == 60
    assert "100" in str(err) and "45" in str(err) and "\n" not in str(err)

"""Every limit in one place: each default inside its own range, and a value outside said with the range."""

import pytest

from attnviz import settings


def bounds() -> list[settings.Bound]:
    return [value for value in vars(settings).values() if isinstance(value, settings.Bound)]


def test_every_default_lies_in_its_range():
    assert len(bounds()) >= 12
    for bound in bounds():
        assert bound.low <= bound.default <= bound.high, bound
        assert bound.check(bound.low) == bound.low and bound.check(bound.high) == bound.high


@pytest.mark.parametrize("value", [0, 8193])
def test_a_value_out_of_range_names_the_setting_and_the_range(value):
    with pytest.raises(ValueError) as caught:
        settings.MAX_TOKENS.check(value)
    assert str(caught.value) == f"max_tokens ({value}) must be from 1 to 8192"


@pytest.mark.slow
def test_the_request_budget_is_smollm2s_largest_request():
    assert settings.MAX_TOKENS.high * 30 * 9 == settings.REQUEST_HEAD_TOKENS
    assert settings.EXAMPLES[settings.DEFAULT_EXAMPLE] == settings.DEFAULT_TEXT
    assert set(settings.CHINESE_EXAMPLES) <= set(settings.EXAMPLES)

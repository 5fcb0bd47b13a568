"""The walkthrough: its steps compose to the layer's own forward, and the code it shows is the code that ran."""

import inspect
import textwrap

import pytest

from attnviz.core.attention import (
    MultiHeadAttention,
    apply_mask,
    attention_scores,
    attention_weights,
    fully_masked_rows,
    masked_softmax,
    merge_heads,
    split_heads,
    weighted_values,
)
from attnviz.labs.walkthrough.code import CALLED, CALLED_WITHIN, ShownCode, excerpt
from attnviz.labs.walkthrough.steps import walk
from tests.unit.labs.walkthrough.layers import layer_input


def file_lines(code: ShownCode) -> list[str]:
    """The lines of the file that ``code`` says it shows, read independently of attnviz.labs.walkthrough."""
    with open(inspect.getsourcefile(code.function), encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    chosen, end = [], None
    for a, b in code.lines:
        if end is not None and a > end + 1:  # spans that do not touch are joined by "..."
            chosen.append(lines[a - 1][: len(lines[a - 1]) - len(lines[a - 1].lstrip())] + "...")
        chosen.extend(lines[a - 1 : b])
        end = b
    return textwrap.dedent("\n".join(chosen)).splitlines()


@pytest.mark.parametrize("config", ["mha", "gqa"])
def test_the_shown_source_is_the_source_of_what_ran(config):
    layer = layer_input(config, causal=True)
    result = walk(layer)
    for step in result.steps:
        assert step.code, step.key
        for code in step.code:
            assert code.text.splitlines() == file_lines(code), (step.key, code.name)
            if code.relation in (CALLED, CALLED_WITHIN):
                assert code.text == textwrap.dedent(inspect.getsource(code.function)), (step.key, code.name)
            assert str(code.header()).startswith(f"# {code.name} (attnviz/")
    called = {code.function for step in result.steps for code in step.code if code.relation == CALLED}
    assert called == {
        split_heads,
        attention_scores,
        fully_masked_rows,
        apply_mask,
        attention_weights,
        weighted_values,
        merge_heads,
    }
    assert result.step("softmax").code[1].function is masked_softmax  # the branch a given mask takes


def test_excerpts_fail_loudly_when_their_lines_move():
    with pytest.raises(LookupError, match="no line starting 'scores = q @ k' any more"):
        excerpt(MultiHeadAttention.__init__, (("scores = q @ k", "scores = q @ k"),), CALLED)

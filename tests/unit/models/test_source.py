"""The source interface's shared pieces: the checks every family runs, and turning run-time failures into one line."""

import pytest
import torch

from attnviz.errors import ModelUnavailableError
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.registry import EMBEDDED, SourceSpec, open_source
from attnviz.models.source import (
    AttentionSource,
    check_batch,
    check_layer,
    check_square_mask,
    perturbed_ids,
    running,
    tiled,
)


def test_the_embedded_model_satisfies_the_interface_every_page_asks():
    source = open_source(SourceSpec(EMBEDDED, config=EmbeddedConfig(d_model=16, n_head=2, n_layer=1)))
    assert isinstance(source, AttentionSource)
    for method in ("prefill_kv", "greedy_decoder", "attention_layers", "states_under_mask"):
        assert callable(getattr(source, method))


def test_tiled_repeats_and_cuts_to_exactly_n():
    assert tiled([1, 2, 3], 7) == [1, 2, 3, 1, 2, 3, 1] and tiled([5], 1) == [5] and tiled([1, 2, 3], 2) == [1, 2]
    with pytest.raises(ValueError, match="tokens"):
        tiled([], 3)
    with pytest.raises(ValueError, match="at least 1"):
        tiled([1], 0)
    with pytest.raises(ValueError, match="batch"):
        check_batch(0)


def test_perturbed_ids_change_only_from_start_stay_in_the_vocabulary_and_repeat_with_the_seed():
    ids = list(range(10))
    changed = perturbed_ids(ids, 4, vocab_size=50, seed=3)
    assert changed[:4] == ids[:4] and all(a != b for a, b in zip(changed[4:], ids[4:], strict=True))
    assert all(0 <= i < 50 for i in changed) and changed == perturbed_ids(ids, 4, vocab_size=50, seed=3)
    assert perturbed_ids(ids, 10, 50, 0) == ids


def test_layer_and_mask_checks_say_what_was_expected():
    assert check_layer(2, 3) == 2
    with pytest.raises(ValueError, match="0 to 2"):
        check_layer(3, 3)
    check_square_mask(torch.ones(4, 4, dtype=torch.bool), 4)
    with pytest.raises(ValueError, match="4"):
        check_square_mask(torch.ones(3, 4, dtype=torch.bool), 4)
    with pytest.raises(TypeError, match="bool"):
        check_square_mask(torch.ones(4, 4, dtype=torch.int64), 4)


def test_running_turns_a_models_own_failure_into_one_line_and_leaves_bugs_alone():
    with pytest.raises(ModelUnavailableError) as caught, running("tiny"):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied\n(deep in a layer)")
    assert str(caught.value).startswith("tiny") and "shapes cannot be multiplied" in str(caught.value)
    assert "\n" not in str(caught.value) and isinstance(caught.value.__cause__, RuntimeError)
    with pytest.raises(TypeError), running("tiny"):
        raise TypeError("a programming error is not the user's")

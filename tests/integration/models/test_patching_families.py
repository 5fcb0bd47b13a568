"""Patching and its estimate on families other than SmolLM2, against reference values: exact patching of a head
equals plain pre-hooks on the model's own output projection (Llama's ``o_proj``, GPT-2's Conv1D ``c_proj``), and
attribution patching equals its first-order definition computed by hand with autograd (both references in
tests/integration/patching_reference.py). Small random models in float32 and bfloat16 (the references run on the
same model in the same dtype); the bounds are derived from the dtype's eps, the size of the values and the depth of
the roundings, and every effect checked lies past its bound."""

import pytest

from attnviz.labs.heads_matter import patching
from tests.integration import patching_reference as ref

FAMILIES = [(family, dtype) for family in ("llama", "gpt2") for dtype in ("float32", "bfloat16")]


def _pair(tmp_path, smollm2, family: str, dtype: str):
    from attnviz.models.hf.loading import load_hf_source
    from attnviz.models.hf.placement import Placement

    source = load_hf_source(str(ref.tiny_family(tmp_path / family, smollm2, family)), placement=Placement(dtype))
    assert str(source.model.dtype) == f"torch.{dtype}"
    return source, patching.run_pair(source, ref.CLEAN, ref.CORRUPT, 32, patching.parse_metric(ref.METRIC))


@pytest.mark.parametrize(("family", "dtype"), FAMILIES)
def test_exact_patching_equals_plain_hooks_on_other_families(tmp_path, smollm2, family, dtype):
    """Each head's slice of the projection's input taken from the clean run into the corrupted run, by a plain
    pre-hook on a single pass: the lab's batched, resumed passes give the same logit difference."""
    source, pair = _pair(tmp_path, smollm2, family, dtype)
    ref.check_exact_patching(source, pair, dtype, ref.HEADS[family])


@pytest.mark.parametrize(("family", "dtype"), FAMILIES)
def test_the_estimate_is_its_first_order_definition_on_other_families(tmp_path, smollm2, family, dtype):
    """AtP by hand: a zero added to every projection input of the corrupted run, the gradient of the logit difference
    at it, times (x_clean − x_corrupt), summed per head over positions and the head's slice, over the gap."""
    source, pair = _pair(tmp_path, smollm2, family, dtype)
    ref.check_estimate(source, pair, dtype, ref.HEADS[family])

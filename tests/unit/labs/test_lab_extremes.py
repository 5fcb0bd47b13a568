"""Issue 19 H and I: the labs at the sidebar's extremes say there is nothing to measure instead of raising
torch's errors (a one-token text on the Scaling page, an empty text in the KV page's MHA -> GQA check)."""

import math

import pytest

from attnviz.labs import scaling
from attnviz.labs.kv.gqa import gqa_whatif
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel


@pytest.fixture(scope="module")
def model():
    return EmbeddedModel(EmbeddedConfig(d_model=32, n_head=4, n_kv_head=2, n_layer=2, causal=True))


def test_the_gradient_curve_of_a_one_token_text_is_none_not_a_type_error(model):
    record = model.run("the cat", 1)  # Max tokens = 1: the one row sees one key, no choice to make
    assert record.q_len == 1 and not bool(record.live_rows().any())
    assert scaling.gradient_curve(record, 0, 0) is None
    two = model.run("the cat", 2)  # the second row sees two keys: one row to measure
    curve = scaling.gradient_curve(two, 1, 3, multiples=[1.0])
    assert curve is not None and len(curve.jacobian_norm) == 1 and math.isfinite(curve.jacobian_norm[0])


def test_the_whatif_of_an_empty_text_is_a_value_error_with_a_message(model):
    with pytest.raises(ValueError, match=r"^The layer got no tokens, so there is nothing to compare"):
        gqa_whatif(model.attention_layer("", 32, 0))
    assert len(gqa_whatif(model.attention_layer("the cat", 32, 0))) == 2 * 4  # groups 1 and 2, four query heads


@pytest.mark.slow  # 2 x 20,000 random vectors at each d_k up to 1,024, as test_scaling's variance test
def test_the_random_variance_is_computed_once_and_handed_out_as_a_fresh_frame():
    first, second = scaling.random_variance(), scaling.random_variance()
    assert first is not second and first.equals(second)
    assert first["d_k"].tolist() == list(scaling.VARIANCE_DIMS)
    assert first["var_scaled"].between(0.9, 1.1).all()  # 20,000 samples: within 10 % of 1

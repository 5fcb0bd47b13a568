"""Which heads matter, by hand: the metrics, the agreement of two rankings, the final norm's frozen-scale reading,
where a resumed pass starts, and the map's scale."""

import math

import pytest
import torch

from attnviz.core.ranking import spearman
from attnviz.figures.heads_matter import make_head_effect_figure
from attnviz.labs.heads_matter import patching
from attnviz.labs.heads_matter.agreement import agreement, top_overlap
from attnviz.labs.heads_matter.direct_logits import norm_reading
from attnviz.models.hf.points import widened as _widened
from attnviz.models.resume import CachedLayers


def test_spearman_and_the_top_overlap_by_hand():
    # ranks 1 2 3 4 against 1 3 2 4: rho = 1 - 6 * (0 + 1 + 1 + 0) / (4 * 15) = 0.8
    assert spearman([1, 2, 3, 4], [10, 30, 20, 40]) == pytest.approx(0.8)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 1], [1, 2, 3]) is None  # a constant ranking has no order: undefined (core.ranking)
    assert top_overlap([5, -1, 4, 0], [4, 0, -5, 1], k=2) == 2  # by |value|: {0, 2} both times
    assert top_overlap([5, 1, 4, 0], [0, 5, 1, 4], k=2) == 0
    found = agreement([[0.5, -0.1], [0.3, 0.0]], [[0.6, None], [-0.2, 0.01]], k=2)
    assert (found.n_heads, found.k, found.overlap) == (3, 2, 2) and found.spearman == pytest.approx(1.0)


def test_metrics_by_hand():
    metric = patching.Metric("logit-diff", (" a", " b"), (1, 2))
    out = torch.tensor([[[0.0, 5.0, 1.0], [0.0, 2.0, 7.0]]])  # (1, T=2, vocab=3)
    assert patching.metric_of(metric, out, out[0], [0, 1]).tolist() == [2.0 - 7.0]
    # the loss of predicting token 1 from position 0: -log softmax([0, 5, 1])[1]
    loss = patching.metric_of(patching.Metric("loss"), out, out[0], [0, 1])
    assert loss.item() == pytest.approx(-(5.0 - math.log(1 + math.exp(5) + math.e)))
    assert patching.metric_of(patching.Metric("kl"), out, out[0], [0, 1]).item() == pytest.approx(0.0, abs=1e-15)
    hidden = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]])
    other = torch.tensor([[[0.0, 1.0], [0.0, 3.0]]])
    assert patching.metric_of(patching.Metric("hidden"), hidden, hidden[0], ()).item() == 0.0  # exactly
    assert patching.metric_of(patching.Metric("hidden"), other, hidden[0], ()).item() == pytest.approx(0.5)
    assert patching.parse_metric("logit-diff: Mary, John").tokens == (" Mary", " John")
    assert patching.parse_metric("logit-diff:a,b").label == "logit('a') − logit('b')"
    assert patching.parse_metric("loss") == patching.Metric("loss")


def test_the_final_norms_frozen_scale_reading():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(3, 8, generator=generator)
    w, b = torch.randn(8, generator=generator), torch.randn(8, generator=generator)
    rms = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    centre, gain, _, sigma = norm_reading(x, rms, w, None, 1e-6, 1e-3)
    assert torch.allclose(sigma[:, 0].float(), torch.sqrt(x.pow(2).mean(-1) + 1e-6))
    assert (centre, gain) == (False, "w")
    layer = torch.nn.functional.layer_norm(x, (8,), w, b, eps=1e-5)
    centre, gain, _, _ = norm_reading(x, layer, w, b, 1e-5, 1e-3)
    assert (centre, gain) == (True, "w")
    gemma = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + w)
    assert norm_reading(x, gemma, w, None, 1e-6, 1e-3)[1] == "1 + w"
    assert norm_reading(x, torch.tanh(x), w, None, 1e-6, 1e-3) is None  # not a norm a frozen scale reads
    # OLMo's LayerNorm stores no weight, bias or epsilon (it passes 1e-5): on a stream whose variance is near the
    # epsilon, the stored-nothing reading tries the usual epsilons and finds 1e-5; a wrong one given does not read
    small = x * 3e-3
    olmo = torch.nn.functional.layer_norm(small, (8,), None, None, eps=1e-5)
    centre, gain, _, sigma = norm_reading(small, olmo, None, None, None, 1e-3)
    assert (centre, gain) == (True, "1")
    assert torch.allclose(sigma[:, 0], (small.double().var(-1, unbiased=False) + 1e-5).sqrt())
    assert norm_reading(small, olmo, None, None, 1e-8, 1e-3) is None


def test_where_a_resumed_pass_starts():
    # a hybrid's four layers: no attention, one attention call, two, one
    cache = CachedLayers(outputs=[None] * 4, calls_before=[0, 0, 1, 3], n_calls=4, nbytes=0)
    assert [cache.start_for(call) for call in range(4)] == [1, 2, 2, 3]
    one = torch.arange(6.0).view(1, 2, 3)
    widened = _widened((one, None, torch.zeros(3)), 4)
    assert widened[0].shape == (4, 2, 3) and torch.equal(widened[0][3], one[0]) and widened[1] is None
    assert widened[2].shape == (3,)  # a tensor without a batch of 1 is left as it is


def test_the_map_is_centred_and_fitted():
    fig = make_head_effect_figure([[0.5, -0.25], [None, 0.1]], title="t", measure="m")
    heat = fig.data[0]
    assert (heat.zmin, heat.zmax) == (-0.5, 0.5) and heat.text[1][0] == "not run"
    assert fig.layout.plot_bgcolor == "#d9d9d9"
    shared = make_head_effect_figure([[0.1]], title="t", measure="m", limit=0.8)
    assert (shared.data[0].zmin, shared.data[0].zmax) == (-0.8, 0.8)
    unsigned = make_head_effect_figure([[0.0, 0.0]], title="t", measure="m", signed=False)
    assert (unsigned.data[0].zmin, unsigned.data[0].zmax) == (0.0, 1.0)  # all zero: a scale, not a division by 0

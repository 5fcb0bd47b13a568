"""The walkthrough: its steps compose to the layer's own forward, and the code it shows is the code that ran."""

import math

import pytest
import torch

from attnviz.core import attention
from attnviz.core.attention import (
    MultiHeadAttention,
    attention_scores,
    masked_softmax,
    merge_heads,
    split_heads,
    weighted_values,
)
from attnviz.core.tokenizer import Token
from attnviz.labs.walkthrough.steps import walk
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.models.source import LayerInput
from tests.tolerances import derived_bound
from tests.unit.labs.walkthrough.layers import CONFIGS, TEXT, layer_input

STEP_KEYS = ["project", "split", "scores", "scale", "mask", "softmax", "weighted", "merge", "w_o"]


def forward(layer: LayerInput):
    with torch.no_grad():
        return layer.attention(
            layer.hidden, layer.hidden, layer.hidden, mask=layer.mask, rotate=layer.rotate, scale=layer.scale
        )


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_the_steps_compose_to_the_modules_output(config, causal):
    layer = layer_input(config, causal)
    result = walk(layer)
    output, weights = forward(layer)
    assert [s.key for s in result.steps] == STEP_KEYS
    # the steps call the forward's own functions on the same tensors: the same arithmetic, exact
    assert torch.equal(result.output, output)
    assert torch.equal(result.step("softmax").tensors["weights"], weights)
    assert result.output_diff == 0.0 and result.weights_diff == 0.0
    # a wrong scale would not compose: the comparison can fail
    wrong = walk(LayerInput(**{**layer.__dict__, "scale": 1 / math.sqrt(layer.attention.d_model)}))
    assert (wrong.output - output).abs().max().item() > 1e-3


@pytest.mark.parametrize("causal", [False, True])
def test_the_layer_input_is_what_entered_that_layer(causal):
    """The softmax step on layer 1's input equals the model's own weights of layer 1 (and of layer 0)."""
    model = EmbeddedModel(EmbeddedConfig(d_model=48, n_head=6, n_kv_head=3, n_layer=3, causal=causal))
    reference = model.reference_weights(TEXT, 64)  # (n_layer, n_head, T, T)
    for index in range(3):
        weights = walk(model.attention_layer(TEXT, 64, index)).step("softmax").tensors["weights"][0]
        # the same blocks on the same input, then the forward's own functions: exact
        assert torch.equal(weights, reference[index])
    assert model.attention_layer(TEXT, 64, 0).attention is model.blocks[0].attn


def test_each_step_has_the_shape_it_claims():
    layer = layer_input("mha", causal=True)
    T = layer.hidden.shape[1]
    shapes = {s.key: s.shapes for s in walk(layer).steps}
    assert shapes["project"] == {"q": (1, T, 512), "k": (1, T, 512), "v": (1, T, 512)}
    assert shapes["split"] == {"q": (1, 8, T, 64), "k": (1, 8, T, 64), "v": (1, 8, T, 64)}
    for key in ("scores", "scale", "mask"):
        assert shapes[key] == {"scores": (1, 8, T, T)}
    assert shapes["softmax"] == {"weights": (1, 8, T, T)}
    assert shapes["weighted"] == {"out": (1, 8, T, 64)}
    assert shapes["merge"] == {"merged": (1, T, 512)}
    assert shapes["w_o"] == {"output": (1, T, 512)}
    assert "(batch, 8, seq, 64), the tutorial's example" in str(walk(layer).step("split").change)
    gqa = {s.key: s.shapes for s in walk(layer_input("gqa", causal=False)).steps}
    assert gqa["project"] == {"q": (1, T, 64), "k": (1, T, 32), "v": (1, T, 32)}
    assert gqa["split"] == {"q": (1, 4, T, 16), "k": (1, 2, T, 16), "v": (1, 2, T, 16)}
    assert gqa["scores"] == {"scores": (1, 4, T, T)} and gqa["weighted"] == {"out": (1, 4, T, 16)}


@pytest.mark.parametrize("config", ["mha", "gqa"])
def test_each_called_function_produced_its_steps_tensor(config):
    layer = layer_input(config, causal=True)
    result = walk(layer)
    step = result.step
    mha = layer.attention
    q, k, v = (step("split").tensors[name] for name in "qkv")
    assert torch.equal(step("project").tensors["q"], mha.w_q(layer.hidden).detach())
    assert torch.equal(q, split_heads(step("project").tensors["q"], mha.n_head))
    assert torch.equal(step("scores").tensors["scores"], attention_scores(q, k, 1.0))
    # the scale, mask and softmax steps called what the forward calls: bit for bit
    scaled = step("scale").tensors["scores"]
    assert torch.equal(scaled, step("scores").tensors["scores"] * layer.scale)
    assert torch.equal(step("mask").tensors["scores"], scaled.masked_fill(~layer.mask.cpu(), float("-inf")))
    weights = step("softmax").tensors["weights"]
    assert torch.equal(weights, masked_softmax(step("mask").tensors["scores"]))
    assert torch.equal(step("weighted").tensors["out"], weighted_values(weights, v))
    assert torch.equal(step("merge").tensors["merged"], merge_heads(step("weighted").tensors["out"]))
    T = layer.hidden.shape[1]
    assert f"{T * (T - 1) // 2:,} of {T * T:,} cells" in str(step("mask").change)  # the sentence counts the real mask


def test_a_hand_computed_two_token_one_head_case():
    """x = [[1, 0], [0, 2]], identity projections: q = k = v = x, q·kᵀ = [[1, 0], [0, 4]], scale 1/√2."""
    mha = MultiHeadAttention(2, 1, bias=False)
    with torch.no_grad():
        for linear in (mha.w_q, mha.w_k, mha.w_v, mha.w_o):
            linear.weight.copy_(torch.eye(2))
    x = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]])  # (1, 2, 2)
    tokens = [Token("a", 0, 1), Token("b", 2, 3)]
    s = 1 / math.sqrt(2)
    e = math.exp

    def run(mask):
        return walk(LayerInput(0, mha, x, mask, None, s, tokens, 2))

    free = run(None)
    assert torch.equal(free.step("scores").tensors["scores"][0, 0], torch.tensor([[1.0, 0.0], [0.0, 4.0]]))
    assert torch.allclose(free.step("scale").tensors["scores"][0, 0], torch.tensor([[s, 0.0], [0.0, 4 * s]]))
    expected = torch.tensor(
        [[e(s) / (e(s) + 1), 1 / (e(s) + 1)], [1 / (1 + e(4 * s)), e(4 * s) / (1 + e(4 * s))]]
    )  # softmax of each row by hand
    # float32 against float64 by hand: scores ≤ 4s = 2.8, two exps summed; the output weighs values ≤ 2 by them
    by_hand = derived_bound("float32", 4 * s, 2 + 2)
    assert torch.allclose(free.step("softmax").tensors["weights"][0, 0], expected, atol=by_hand, rtol=0)
    assert torch.allclose(free.output[0], expected @ x[0], atol=2 * by_hand, rtol=0)
    assert free.step("softmax").code[1].function is attention._softmax  # no mask: the forward's other branch
    assert "There is no mask" in str(free.step("mask").change)

    causal = run(torch.tensor([[True, False], [True, True]]))
    masked = causal.step("mask").tensors["scores"][0, 0]
    assert masked[0, 1].item() == float("-inf") and torch.allclose(masked[1], torch.tensor([0.0, 4 * s]))
    weights = causal.step("softmax").tensors["weights"][0, 0]
    assert torch.allclose(weights, torch.tensor([[1.0, 0.0], expected[1].tolist()]), atol=by_hand, rtol=0)
    assert "1 of 4 cells of every head were set to −inf (causal)" in str(causal.step("mask").change)


def test_a_fully_masked_row_gets_zeros_through_the_executed_branch():
    layer = layer_input("gqa", causal=False)
    T = layer.hidden.shape[1]
    mask = torch.ones(T, T, dtype=torch.bool)
    mask[2] = False  # query 2 may see nothing
    layer = LayerInput(**{**layer.__dict__, "mask": mask})
    result = walk(layer)
    weights = result.step("softmax").tensors["weights"]
    assert weights[0, :, 2].abs().max().item() == 0.0 and not weights.isnan().any()
    assert torch.equal(result.output, forward(layer)[0])  # the forward's own functions: exact
    assert "1 query row sees no key" in str(result.step("softmax").change)


def test_layers_out_of_range_are_refused_with_the_range():
    model = EmbeddedModel(EmbeddedConfig(n_layer=2))
    with pytest.raises(ValueError, match=r"layer \(2\) must be from 0 to 1"):
        model.attention_layer(TEXT, 64, 2)
    assert len(model.attention_layer(" ".join(["w"] * 600), 8192, 0).tokens) == 512  # PARITY_TOKENS at most

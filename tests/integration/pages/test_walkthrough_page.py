"""The Walkthrough page on real models: the steps compose to each model's own layer, and the page draws every step."""

from pathlib import Path

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from attnviz.errors import ParityUnsupportedError
from attnviz.labs.walkthrough.steps import walk
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.models.hf.loading import load_hf_source
from attnviz.models.source import LayerInput
from tests.integration.tiny_models import tiny
from tests.plotly_json import decode, spec_of

ROOT = Path(__file__).resolve().parents[3]
TEXT = "The cat sat on the mat because it was tired. 猫坐在垫子上。"
TOL = 1e-6  # steps against our MultiHeadAttention's forward, as the issue asks
EAGER_TOL = 1e-5  # against the model's own eager attention, as parity does


def forward(layer: LayerInput):
    with torch.no_grad():
        h = layer.hidden
        return layer.attention(h, h, h, mask=layer.mask, rotate=layer.rotate, scale=layer.scale)


def output_projection(source, layer: int) -> torch.nn.Module:
    """The model's own W_O module of ``layer``: BERT's attention.output.dense, Llama's self_attn.o_proj."""
    base = source.model.base_model
    if hasattr(base, "encoder"):
        return base.encoder.layer[layer].attention.output.dense
    return base.layers[layer].self_attn.o_proj


@pytest.mark.parametrize("name", ["minilm", "smollm2"])
def test_the_steps_compose_to_the_models_own_layer(name, request):
    source = request.getfixturevalue(name)
    ids = source.encode(TEXT, 64).ids
    layers = (0, source.n_layer // 2, source.n_layer - 1)
    grabbed = {}
    hooks = [
        output_projection(source, i).register_forward_hook(lambda m, a, out, i=i: grabbed.__setitem__(i, out))
        for i in layers
    ]
    try:
        reference, keys = source.reference_pass(ids)  # the model's own eager weights, each layer's mask
    finally:
        for hook in hooks:
            hook.remove()
    for index in layers:
        layer = source.attention_layer(TEXT, 64, index)
        result = walk(layer)
        output, weights = forward(layer)
        assert (result.output - output.cpu()).abs().max().item() <= TOL, (name, index)
        assert (result.step("softmax").tensors["weights"] - weights.cpu()).abs().max().item() <= TOL
        assert result.output_diff <= TOL and result.weights_diff <= TOL
        softmax = result.step("softmax").tensors["weights"][0]  # (n_head, T, T)
        assert (softmax - reference[index]).abs().max().item() <= EAGER_TOL, (name, index)
        assert (result.output[0] - grabbed[index][0].cpu()).abs().max().item() <= EAGER_TOL, (name, index)
        assert result.mask_description == keys[index].describe()
    rope = [s.key for s in result.steps].count("rope")
    if name == "smollm2":  # Llama: RoPE through the layer's rotate hook, GQA, a causal mask
        assert rope == 1 and result.step("rope").code[0].function is layer.rotate
        assert result.step("split").shapes["k"] == (1, 3, len(ids), 64) and str(result.mask_description) == "causal"
    else:
        assert rope == 0 and str(result.mask_description) == "no mask (every key)"


def test_the_layer_input_is_this_sessions_while_another_session_uses_the_model(minilm):
    """The pre-hook on the shared model keeps only this thread's pass, as parity's does."""
    import threading

    stop = threading.Event()

    def other_session():
        while not stop.is_set():
            minilm.run("another user's text, running at the same time, longer than ours by far", 64)

    reference = minilm.reference_weights(TEXT, 64)
    worker = threading.Thread(target=other_session)
    worker.start()
    try:
        for _ in range(3):
            layer = minilm.attention_layer(TEXT, 64, 2)
            assert layer.hidden.shape[1] == reference.shape[-1]
            weights = walk(layer).step("softmax").tensors["weights"][0]
            assert (weights - reference[2]).abs().max().item() <= EAGER_TOL
    finally:
        stop.set()
        worker.join()


def test_a_sliding_window_is_the_mask_the_walkthrough_applies(smollm2, tmp_path):
    from transformers import MistralConfig, MistralForCausalLM

    source = load_hf_source(
        str(tiny(tmp_path / "mistral", smollm2, MistralConfig, MistralForCausalLM, sliding_window=4))
    )
    layer = source.attention_layer(TEXT, 64, 1)
    result = walk(layer)
    assert str(result.mask_description) == "causal, sliding window of 4"
    assert "(causal, sliding window of 4)" in str(result.step("mask").change)
    assert (result.output - forward(layer)[0]).abs().max().item() <= TOL
    reference = source.reference_weights(TEXT, 64)
    assert (result.step("softmax").tensors["weights"][0] - reference[1]).abs().max().item() <= EAGER_TOL


def app() -> AppTest:
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()


def drawn(at: AppTest) -> tuple[list[str], int, int]:
    """The step headings, code blocks and tensor views (charts + tables) on the page."""
    headings = [h.value for h in at.subheader]
    return headings, len(at.code), len(at.get("plotly_chart")) + len(at.dataframe)


@pytest.mark.parametrize("model", ["default", "minilm", "smollm2"])
def test_the_page_draws_every_step_with_every_model(model):
    at = app()
    at.selectbox(key="model").set_value(model).run()
    at.text_area(key="text").input(TEXT).run()
    at.switch_page("pages/walkthrough.py").run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    headings, code_blocks, views = drawn(at)
    numbers = ["1", "2", "2b", "3", "4", "5", "6", "7", "8", "9"] if model == "smollm2" else list("123456789")
    assert [h.split(".")[0] for h in headings] == numbers
    assert code_blocks == views == len(numbers)
    assert all("# attnviz." in c.value for c in at.code)
    assert [m.value for m in at.metric] == ["0.0e+00", "0.0e+00"]  # steps against the forward, output and weights
    at.radio(key="walk_view").set_value("numbers").run()
    assert len(at.dataframe) == len(numbers) and not at.get("plotly_chart")


def test_the_tutorials_shapes_and_the_chosen_head_are_what_is_drawn():
    at = app()
    at.number_input(key="d_model").set_value(512)
    at.number_input(key="n_head").set_value(8)
    at.checkbox(key="causal").check()
    at.text_area(key="text").input(TEXT).run()
    at.switch_page("pages/walkthrough.py").run()
    at.radio(key="walk_view").set_value("heatmap")
    at.selectbox(key="walk_layer").set_value(1)
    at.selectbox(key="walk_head").set_value(5).run()
    assert not at.exception and not at.error
    model = EmbeddedModel(EmbeddedConfig(d_model=512, n_head=8, causal=True))
    T = len(model.encode(TEXT, 256).tokens)
    assert any(f"`q` (1, 8, {T}, 64)" in c.value and "the tutorial's example" in c.value for c in at.caption)
    charts = [spec_of(c) for c in at.get("plotly_chart")]
    softmax = decode(charts[5]["data"][0]["z"]).reshape(T, T)  # step 6
    expected = model.reference_weights(TEXT, 256)[1, 5].numpy()
    visible = np.tril(np.ones((T, T), dtype=bool))
    assert np.isnan(softmax[~visible]).all()  # the future is grey, as everywhere in attnviz
    assert np.allclose(softmax[visible], expected[visible], atol=1e-6)


def test_a_family_our_layers_cannot_run_is_explained(smollm2, tmp_path):
    from transformers import Gemma2Config, Gemma2ForCausalLM

    folder = tiny(tmp_path / "gemma2", smollm2, Gemma2Config, Gemma2ForCausalLM, head_dim=16, sliding_window=4)
    with pytest.raises(ParityUnsupportedError, match="not 'gemma2' layers"):
        load_hf_source(str(folder)).attention_layer(TEXT, 64, 0)
    at = app()
    at.selectbox(key="model").set_value("path").run()
    at.text_input(key="model_path").input(str(folder)).run()
    at.switch_page("pages/walkthrough.py").run()
    assert not at.exception and not at.error
    assert any("cannot be walked through here" in i.value and "gemma2" in i.value for i in at.info)
    assert not at.code and not at.get("plotly_chart")

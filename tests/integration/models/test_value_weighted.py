"""Value-weighted attention on real models: the capture's norms against v and W_O read straight from the model,
the output projections found for the zoo's architectures (or refused in one line), and the switch on both pages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from attnviz.core.value_norms import LOW_NORM_STAT
from attnviz.models.hf.projections import find_output_projections, head_blocks
from tests.integration.tiny_models import tiny
from tests.integration.zoo.build import build_zoo, zoo_dir
from tests.plotly_json import spec_of

ROOT = Path(__file__).resolve().parents[3]
TEXT = "The cat sat on the mat because it was tired. 猫坐着。"
TOLERANCE = 1e-5


def _direct_norms(source, values: list, outputs: list) -> list[torch.Tensor]:
    """‖v_j W_O^h‖ from the v projection's output and the output projection's weight: [(n_head, T)] per layer."""
    n_head, n_kv_head = source.n_head, source.n_kv_head
    result = []
    for v_out, o_proj in zip(values, outputs, strict=True):
        v = v_out[0].float()  # (T, n_kv_head * hd)
        hd = v.shape[-1] // n_kv_head
        v = v.view(-1, n_kv_head, hd).transpose(0, 1)  # (n_kv_head, T, hd)
        v = v.repeat_interleave(n_head // n_kv_head, dim=0)  # (n_head, T, hd): repeat_kv
        weight = o_proj.weight.detach().float()  # (d_model, n_head * hd), nn.Linear
        per_head = torch.stack([v[h] @ weight[:, h * hd : (h + 1) * hd].T for h in range(n_head)])  # (n_head, T, d)
        result.append(torch.linalg.vector_norm(per_head, dim=-1))
    return result


def _check_against_hooks(source, v_modules: list, o_modules: list) -> None:
    assert source.has_value_norms  # the probe pass that finds W_O runs here, before the hooks see anything
    seen: list = []
    hooks = [m.register_forward_hook(lambda mod, args, out: seen.append(out.detach())) for m in v_modules]
    try:
        record = source.run(TEXT, 24)
    finally:
        for h in hooks:
            h.remove()
    assert source.has_value_norms and record.has_value_norms
    direct = _direct_norms(source, seen, o_modules)
    for layer, expected in enumerate(direct):
        torch.testing.assert_close(record.value_norms(layer), expected, atol=TOLERANCE, rtol=TOLERANCE)
    stats = record.statistics
    assert LOW_NORM_STAT in stats.columns and stats[LOW_NORM_STAT].between(0, 1).all()
    # the map is the weights times the norms of their keys
    torch.testing.assert_close(
        record.value_weighted(0, 1), record.weights(0, 1) * direct[0][1][None, :], atol=TOLERANCE, rtol=TOLERANCE
    )


def test_norms_equal_v_and_o_proj_on_a_tiny_llama(tmp_path, smollm2):
    from transformers import LlamaConfig, LlamaForCausalLM

    from attnviz.models.hf.loading import load_hf_source

    source = load_hf_source(str(tiny(tmp_path / "llama", smollm2, LlamaConfig, LlamaForCausalLM)))
    layers = source.model.model.layers
    assert source.n_kv_head < source.n_head  # GQA: query heads read their kv head
    _check_against_hooks(source, [b.self_attn.v_proj for b in layers], [b.self_attn.o_proj for b in layers])


def test_norms_equal_v_and_o_proj_on_smollm2(smollm2):
    layers = smollm2.model.model.layers
    _check_against_hooks(smollm2, [b.self_attn.v_proj for b in layers], [b.self_attn.o_proj for b in layers])
    found = smollm2.output_projections
    assert found.found and [p.module for p in found.layers] == [b.self_attn.o_proj for b in layers]


def test_norms_equal_value_and_output_dense_on_minilm(minilm):
    layers = minilm.model.base_model.encoder.layer
    _check_against_hooks(minilm, [b.attention.self.value for b in layers], [b.attention.output.dense for b in layers])


ZOO_TYPES = ["llama", "gpt2", "bert", "gemma2", "gpt_oss", "diffllama"]  # Linear, Conv1D, a sibling, softcap, sinks
# the finder's committed refusals, by the words of their reason; every other type's W_O is found
FINDER_REFUSES = {"diffllama": "output is changed before any projection reads it"}  # attention called twice


@pytest.fixture(scope="module")
def zoo() -> dict[str, dict]:
    return build_zoo(ZOO_TYPES)  # cached folders: built once per transformers version


@pytest.mark.parametrize("model_type", ZOO_TYPES)
def test_zoo_projections_are_found_by_data_flow_or_refused(zoo, model_type):
    """Each found W_O reproduces its module (Σ_h z_h W_O^h + b), and on a decoder key 0's norm is what row 0 feeds
    the projection (row 0 sees only key 0, so its input is v_0); a refusal says why in one line. Every type here is
    exact by docs/models.md's table: one the zoo does not build or attnviz refuses fails, it is not skipped."""
    from attnviz.models.hf.loading import load_hf_source

    status = zoo[model_type]
    assert status["status"] == "built", f"{model_type} has no zoo model: {status.get('reason')}"
    source = load_hf_source(str(zoo_dir() / model_type))  # a refusal (ModelUnavailableError) fails the test
    found = source.output_projections  # the probe pass runs here, before the hooks below
    assert found.found == (model_type not in FINDER_REFUSES), found.reason
    if not found.found:
        assert FINDER_REFUSES[model_type] in found.reason and "\n" not in found.reason
        assert not source.has_value_norms and not source.run(TEXT, 8).has_value_norms
    else:
        _check_found(source, found)


def _check_found(source, found) -> None:
    """Each found W_O against its module, and row 0's norms against what reaches the projection."""
    inputs: dict = {}
    hooks = [
        p.module.register_forward_pre_hook(lambda mod, args, i=i: inputs.setdefault(i, args[0].detach()))
        for i, p in enumerate(found.layers)
    ]
    try:
        record = source.run(TEXT, 8)
    finally:
        for h in hooks:
            h.remove()
    assert record.has_value_norms and len(found.layers) == record.n_layer
    for i, projection in enumerate(found.layers):
        z = torch.randn(3, projection.n_head * projection.head_dim)
        blocks = head_blocks(projection.module, projection.n_head)  # (n_head, hd, d_model)
        summed = sum(z[:, projection.head_slice(h)] @ blocks[h] for h in range(projection.n_head))
        bias = projection.bias()
        with torch.no_grad():
            torch.testing.assert_close(summed + (0 if bias is None else bias), projection.module(z).float())
        if source.causal:
            z0 = inputs[i].reshape(-1, inputs[i].shape[-1])[0].float()  # row 0's input: v_0 of every head
            direct = torch.stack(
                [torch.linalg.vector_norm(z0[projection.head_slice(h)] @ blocks[h]) for h in range(projection.n_head)]
            )
            if record.has_sinks:  # a learned sink takes a share of row 0: its input is (1 - share)·v_0
                share = record.layers[i].rows.get("sink_weight", torch.zeros(record.n_head, 1))[:, 0]
                direct = direct / (1 - share)
            torch.testing.assert_close(record.value_norms(i)[:, 0], direct, atol=TOLERANCE, rtol=TOLERANCE)


def test_the_probe_refuses_a_model_whose_attention_output_is_changed(smollm2):
    """Scaling what reaches o_proj breaks the data flow: the finder refuses, it does not guess."""
    layers = smollm2.model.model.layers
    hooks = [b.self_attn.o_proj.register_forward_pre_hook(lambda mod, args: (2 * args[0],)) for b in layers]
    try:
        found = find_output_projections(smollm2.model, smollm2.n_head)
    finally:
        for h in hooks:
            h.remove()
    assert not found.found and "changed before any projection" in found.reason


def _app(model: str, page: str, text: str = TEXT) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.selectbox(key="model").set_value(model).run()
    at.text_area(key="text").input(text).run()
    at.switch_page(page).run()
    assert not at.exception, at.exception
    return at


def _colorbar_titles(at) -> list[str]:
    titles = []
    for chart in at.get("plotly_chart"):
        for trace in spec_of(chart)["data"]:
            bar = trace.get("colorbar") or (trace.get("marker") or {}).get("colorbar")
            if bar and bar.get("title"):
                titles.append(bar["title"]["text"])
    return titles


@pytest.mark.parametrize("model", ["default", "smollm2"])
def test_the_switch_on_the_heads_page(model):
    at = _app(model, "pages/heads.py")
    assert "‖α·vW_O‖" not in _colorbar_titles(at)
    before = spec_of(at.get("plotly_chart")[0])["data"][0]["z"]  # the large view (the grid is no Plotly chart)
    at.radio(key="heads_values").set_value("values").run()
    assert not at.exception, at.exception
    assert "‖α·vW_O‖" in _colorbar_titles(at)
    assert any("Kobayashi" in c.value for c in at.caption)
    after = spec_of(at.get("plotly_chart")[0])["data"][0]["z"]
    assert json.dumps(after) != json.dumps(before)


def test_the_switch_on_the_token_view():
    at = _app("default", "pages/tokens.py")
    at.radio(key="tokens_values").set_value("values").run()
    assert not at.exception, at.exception
    assert "‖α·vW_O‖" in _colorbar_titles(at)
    assert any("Kobayashi" in c.value for c in at.caption)

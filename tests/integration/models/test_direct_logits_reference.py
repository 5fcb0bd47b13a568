"""Direct logit attribution, every head at every position, against an independent hook computation
(tests/integration/dla_reference.py) on SmolLM2 and tiny random models of several families, in float32 and bfloat16.

The reference runs the same model object (the weights attnviz attributed) with plain torch hooks: the z slice of
each head through its W_O columns, the config's join scale, the final norm's frozen scale and gain read from the
real forward, the LM head's row and the logit scale read from the same forward.
"""

from __future__ import annotations

import pytest
import torch

from attnviz.labs.heads_matter.direct_logits import direct_logit_attribution
from attnviz.models.readings import Verdict
from tests.integration.dla_reference import join_scale_of, per_head_bound, reference_direct_logits

CLEAN = "When Mary and John went to the store, John gave a drink to"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def compare(source, projections, dtype: torch.dtype, token: str | None = None) -> dict:
    """attnviz's figures against the reference's, every head at every position: the worst difference and the worst
    ratio of difference to bound (≤ 1 passes)."""
    found = direct_logit_attribution(source, CLEAN, 32, token)
    ids = torch.tensor([source.encode(CLEAN, 32).ids], device=source.device)
    token_id = None if token is None else source.token_ids(token)[0]
    reference = reference_direct_logits(source.model, ids, projections, found.per_head.shape[-1], token_id)
    assert found.token_id == reference.token_id  # the default: the model's top next token at the last position
    assert found.per_head.shape == reference.per_head.shape
    difference = (found.per_head - reference.per_head).abs()
    bound = per_head_bound(reference.magnitude, dtype)
    assert bool((difference <= bound).all()), (float(difference.max()), float((difference / bound).max()))
    assert torch.equal(found.logits, reference.logits)  # the model's own logit: the same pass arithmetic
    return {"worst": float(difference.max()), "ratio": float((difference / bound).max()), "found": found}


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_smollm2_every_head_equals_the_reference(smollm2, dtype):
    from attnviz.models.hf.loading import load_hf_source
    from attnviz.models.hf.placement import Placement

    source = smollm2 if dtype == "float32" else load_hf_source("smollm2", placement=Placement(dtype))
    projections = [layer.self_attn.o_proj for layer in source.model.model.layers]
    result = compare(source, projections, DTYPES[dtype], " Mary")
    found = result["found"]
    assert found.per_head.shape == (len(found.tokens), 30, 9)
    assert all(join.verdict is Verdict.FOUND and join.value == 1.0 for join in found.joins)
    print(f"smollm2 {dtype}: worst per-head difference {result['worst']:.3g} ({result['ratio']:.2g} of the bound)")


def _layers(model):
    return model.model.layers


FAMILIES = {  # family: (config fields, the layers' output projections by name, each join's verdict)
    "llama": ({}, lambda m: [layer.self_attn.o_proj for layer in _layers(m)], Verdict.FOUND),
    "qwen2": ({}, lambda m: [layer.self_attn.o_proj for layer in _layers(m)], Verdict.FOUND),
    "gemma": ({"head_dim": 16}, lambda m: [layer.self_attn.o_proj for layer in _layers(m)], Verdict.FOUND),
    "granite": (
        {"residual_multiplier": 0.22, "logits_scaling": 8.0},
        lambda m: [layer.self_attn.o_proj for layer in _layers(m)],
        Verdict.FOUND,
    ),
    "minicpm3": (
        {
            "scale_depth": 1.4,
            "dim_model_base": 16,
            "q_lora_rank": 32,
            "kv_lora_rank": 16,
            "qk_nope_head_dim": 8,
            "qk_rope_head_dim": 8,
            "v_head_dim": 16,
        },
        lambda m: [layer.self_attn.o_proj for layer in _layers(m)],
        Verdict.FOUND,
    ),
    # a parallel block: attention and MLP read the same normed input, and Cohere scales its logits
    "cohere": (
        {"logit_scale": 0.5},
        lambda m: [layer.self_attn.o_proj for layer in _layers(m)],
        Verdict.NOT_APPLICABLE,
    ),
    "gptj": (
        {"n_embd": 64, "n_layer": 2, "n_head": 4, "rotary_dim": 8, "n_positions": 256},
        lambda m: [block.attn.out_proj for block in m.transformer.h],
        Verdict.NOT_APPLICABLE,
    ),
    "gpt2": (  # LayerNorm with a bias, Conv1D projections
        {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 256},
        lambda m: [block.attn.c_proj for block in m.transformer.h],
        Verdict.FOUND,
    ),
}
CLASSES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "gemma": ("GemmaConfig", "GemmaForCausalLM"),
    "granite": ("GraniteConfig", "GraniteForCausalLM"),
    "minicpm3": ("MiniCPM3Config", "MiniCPM3ForCausalLM"),
    "cohere": ("CohereConfig", "CohereForCausalLM"),
    "gptj": ("GPTJConfig", "GPTJForCausalLM"),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel"),
}


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_head_of_a_family_equals_the_reference(tmp_path, smollm2, family, dtype):
    """Each family's every head at every position, attnviz against the reference, within the derived bound; each
    layer's join has the verdict the architecture implies (a parallel block's: not applicable)."""
    import transformers

    from attnviz.models.hf.loading import load_hf_source
    from attnviz.models.hf.placement import Placement
    from tests.integration.tiny_models import tiny

    fields, projections_of, verdict = FAMILIES[family]
    config_cls, model_cls = (getattr(transformers, name) for name in CLASSES[family])
    folder = tiny(tmp_path / family, smollm2, config_cls, model_cls, **fields)
    source = load_hf_source(str(folder), placement=Placement(dtype))
    projections = projections_of(source.model)
    assert [p.module for p in source.output_projections.layers] == projections  # the same modules, found by name
    result = compare(source, projections, DTYPES[dtype])
    found = result["found"]
    assert found.checked, found.check_error
    assert [join.verdict for join in found.joins] == [verdict] * len(projections)
    if dtype == "float32" and verdict is Verdict.FOUND:  # torch multiplies by the config's scale as a float32
        single = float(torch.tensor(join_scale_of(source.model.config), dtype=torch.float32))
        assert found.join_scales == (single,) * len(projections), (found.join_scales, single)
    print(f"{family} {dtype}: worst per-head difference {result['worst']:.3g} ({result['ratio']:.2g} of the bound)")


def test_the_read_outs_are_read_once_per_loaded_model(smollm2, monkeypatch):
    """What turns the stream into logits is the model's: read on one probe pass, then every attribution runs one pass
    of its own text (reading the final norm through ``norm.final``), whatever the text, 1 token included."""
    from attnviz.models.hf import read_outs

    outs = smollm2.read_outs  # read (or already read) once
    assert outs.why is None and "norm.final" in outs.hook_map.points and "norm.final" not in smollm2.hook_map.points
    probes = []
    monkeypatch.setattr(read_outs, "reading_out", lambda *a: probes.append(a))  # a probe pass now would fail
    passes = []
    run_hooked = type(smollm2).run_hooked
    monkeypatch.setattr(
        type(smollm2), "run_hooked", lambda self, *a, **k: passes.append(a) or run_hooked(self, *a, **k)
    )
    for text in (CLEAN, "Mary"):
        found = direct_logit_attribution(smollm2, text, 32)
        assert found.checked, found.check_error
    assert smollm2.read_outs is outs and not probes and len(passes) == 2

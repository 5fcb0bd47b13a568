"""Which heads matter, against this file's own hooks on the models' own modules: the resumed sweep, exact activation
patching, attribution patching's first-order figures and direct logit attribution, on SmolLM2, MiniLM, the embedded
model and small random models of other families (float32 and bfloat16)."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from attnviz.core.ranking import spearman
from attnviz.labs.heads_matter import ablation, attribution, patching
from attnviz.labs.heads_matter.direct_logits import direct_logit_attribution
from attnviz.labs.heads_matter.effect import ablation_effect
from attnviz.labs.heads_matter.reductions import cosine_distance
from attnviz.models.source import Capability, Resumes
from tests.integration.patching_reference import first_order
from tests.tolerances import derived_bound, forward_depth

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
TEXT = "The cat sat on the mat because it was warm and soft."
SWEEP_TOLERANCE = 1e-6  # issue 29: the resumed sweep's numbers against the whole forward's


def o_proj(model, layer):
    return model.model.layers[layer].self_attn.o_proj


def slice_of(head: int, head_dim: int) -> slice:
    return slice(head * head_dim, (head + 1) * head_dim)


def reference_kl_mean(before: torch.Tensor, after: torch.Tensor) -> float:
    """Mean over positions 0 … T − 2 of KL(softmax(before) ‖ softmax(after)), float64 NumPy."""

    def log_softmax(x):
        x = x.numpy().astype(np.float64)
        m = x.max(axis=-1, keepdims=True)
        return x - (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))

    log_p, log_q = log_softmax(before), log_softmax(after)
    return float((np.exp(log_p) * (log_p - log_q)).sum(axis=-1)[:-1].mean())


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_the_resumed_sweep_equals_the_whole_forward_and_plain_hooks(smollm2, mode):
    """Heads of the first, a middle and the last layer: resumed from the cached layers, the same KL as every pass
    whole (1e-6) and as this file's pre-hook on o_proj in the model's own forward."""
    heads = [(0, 3), (14, 0), (29, 8)]
    resumed = ablation.sweep_baseline(smollm2, TEXT, 64, mode, timed=False)
    whole = ablation.sweep_baseline(smollm2, TEXT, 64, mode, timed=False, resume=False)
    assert resumed.resume is not None and resumed.resume_note is None and whole.resume is None
    assert isinstance(smollm2, Resumes) and len(resumed.resume.outputs) == smollm2.n_layer
    got = ablation.sweep_piece(smollm2, TEXT, resumed, heads)
    expected = ablation.sweep_piece(smollm2, TEXT, whole, heads)
    # each pass keeps what the LM head reads and forms the logits block by block in the reduction: the same as the
    # whole (R, T, vocab) logits reduced by kl_rows, but for the order of float32 sums (1e-8: 100 times inside 1e-6)
    assert resumed.through_head is not None and whole.through_head is not None
    logits_path = ablation.sweep_piece(smollm2, TEXT, dataclasses.replace(whole, through_head=None), heads)
    for head in heads:
        assert abs(expected[head] - logits_path[head]) <= 1e-8
    ids = torch.tensor([smollm2.encode(TEXT, 64).ids])
    model, head_dim = smollm2.model, smollm2.head_dim
    with torch.no_grad():
        base = model(input_ids=ids).logits[0].float()
    for layer, head in heads:
        assert abs(got[(layer, head)] - expected[(layer, head)]) <= SWEEP_TOLERANCE

        def rewrite(_, args, head=head):
            x = args[0].clone()
            part = x[..., slice_of(head, head_dim)]
            x[..., slice_of(head, head_dim)] = 0.0 if mode == "zero" else part.mean(dim=1, keepdim=True)
            return (x, *args[1:])

        hook = o_proj(model, layer).register_forward_pre_hook(rewrite)
        try:
            with torch.no_grad():
                after = model(input_ids=ids).logits[0].float()
        finally:
            hook.remove()
        assert abs(got[(layer, head)] - reference_kl_mean(base, after)) <= SWEEP_TOLERANCE


def test_a_shared_layer_model_runs_every_pass_whole_and_says_why(tmp_path, smollm2):
    """ALBERT runs one layer module for every layer: its passes cannot start mid-model, the sweep says why, and its
    numbers are those of the whole forward."""
    from transformers import AlbertConfig, AlbertModel

    from attnviz.models.hf.loading import load_hf_source
    from tests.integration.tiny_models import tiny

    folder = tiny(tmp_path / "albert", smollm2, AlbertConfig, AlbertModel, embedding_size=32)
    source = load_hf_source(str(folder))
    baseline = ablation.sweep_baseline(source, TEXT, 32, "zero", timed=False)
    assert baseline.resume is None and "in order" in baseline.resume_note
    sweep = ablation.ablation_sweep(source, TEXT, 32)
    assert sweep.resumed == baseline.resume_note
    alone = ablation_effect(source, TEXT, 32, [(1, 2)])
    assert sweep.values[1][2] == pytest.approx(alone.hidden_change, abs=1e-6)
    # patching through the one shared projection: each of its calls is its own layer (this file's hook counts them)
    pair = patching.run_pair(source, "the cat sat on the mat", "the dog sat on the mat", 32, patching.Metric("hidden"))
    assert not torch.equal(pair.clean_z[0], pair.clean_z[1])
    got = patching.patch_heads(source, pair, [(1, 2)])[(1, 2)]
    dense = source.output_projections.layers[0].module
    head_dim = source.head_dim
    kept, calls = [], []
    ids = {
        name: torch.tensor([source.encode(text, 32).ids])
        for name, text in (("clean", "the cat sat on the mat"), ("corrupt", "the dog sat on the mat"))
    }
    hook = dense.register_forward_pre_hook(lambda _, args: kept.append(args[0].clone()))
    try:
        with torch.no_grad():
            source.model(input_ids=ids["clean"])
    finally:
        hook.remove()

    def patch(_, args):
        calls.append(1)
        if len(calls) != 2:  # the second call is layer 1
            return None
        x = args[0].clone()
        x[..., slice_of(2, head_dim)] = kept[1][..., slice_of(2, head_dim)]
        return (x, *args[1:])

    hook = dense.register_forward_pre_hook(patch)
    try:
        with torch.no_grad():
            hidden = source.model(input_ids=ids["corrupt"]).last_hidden_state[0]
    finally:
        hook.remove()
    expected = cosine_distance(pair.clean_out, hidden).mean()
    assert got == pytest.approx(float(expected), abs=1e-6)


@pytest.fixture(scope="module")
def ioi(smollm2):
    metric = patching.parse_metric("logit-diff: Mary, John")
    return patching.run_pair(smollm2, CLEAN, CORRUPT, 64, metric)


def test_a_metrics_tokens_are_the_text_after_the_colon(smollm2):
    metric = patching.resolve_metric(smollm2, patching.parse_metric("logit-diff: Mary, John"), True)
    assert metric.tokens == (" Mary", " John") and metric.ids == tuple(
        smollm2.token_ids(" Mary") + smollm2.token_ids(" John")
    )
    with pytest.raises(
        ValueError, match=r"'Marylebone' is not one token: it encodes to 3 \('Mary' \+ 'le' \+ 'bone'\)"
    ):
        patching.resolve_metric(smollm2, patching.parse_metric("logit-diff:Marylebone,John"), True)
    for bad in ("logit-diff", "logit-diff:a", "logit-diff:a,b,c", "logit-diff:,b", "kl:x", "loss ", "LOSS"):
        with pytest.raises(ValueError):
            patching.parse_metric(bad)


def test_exact_patching_equals_plain_hooks(smollm2, ioi):
    """Each head's output taken from the clean run (this file's pre-hook on o_proj, reading the clean run's input
    to it) into the corrupted run: the same logit difference as the lab's batched, resumed passes."""
    assert ioi.clean > ioi.corrupt  # the clean text's answer is Mary
    heads = [(0, 0), (9, 4), (20, 7), (29, 2)]
    got = patching.patch_heads(smollm2, ioi, heads)
    model, head_dim = smollm2.model, smollm2.head_dim
    mary, john = ioi.metric.ids
    clean_ids = torch.tensor([ioi.clean_ids])
    corrupt_ids = torch.tensor([smollm2.encode(CORRUPT, 64).ids])
    for layer, head in heads:
        kept = {}
        hook = o_proj(model, layer).register_forward_pre_hook(
            lambda _, args, kept=kept: kept.setdefault("x", args[0].clone())
        )
        try:
            with torch.no_grad():
                model(input_ids=clean_ids)
        finally:
            hook.remove()

        def patch(_, args, head=head, kept=kept):
            x = args[0].clone()
            x[..., slice_of(head, head_dim)] = kept["x"][..., slice_of(head, head_dim)]
            return (x, *args[1:])

        hook = o_proj(model, layer).register_forward_pre_hook(patch)
        try:
            with torch.no_grad():
                last = model(input_ids=corrupt_ids).logits[0, -1].double()
        finally:
            hook.remove()
        # the lab's batched, resumed passes against this single pass: the same float32 forward in other batch shapes,
        # so rounding alone, over the forward's depth, at the size of the largest logit, for each of the two logits
        config = model.config
        depth = forward_depth(config.num_hidden_layers, config.hidden_size, config.intermediate_size)
        bound = 2 * derived_bound("float32", float(last.abs().max()), depth)
        expected = float(last[mary] - last[john])
        assert abs(got[(layer, head)] - expected) <= bound, (layer, head, got[(layer, head)], expected, bound)
        assert abs(expected - ioi.corrupt) > bound  # the patch moves it past rounding: one that patched nothing fails
    result = patching.patch_result(ioi, got, 0.0, None)
    assert result.effects[9][4] == pytest.approx((got[(9, 4)] - ioi.corrupt) / (ioi.clean - ioi.corrupt))
    assert result.effects[1][1] is None


def test_the_estimate_is_its_first_order_definition(smollm2, ioi):
    """AtP by hand: a zero added to every o_proj input, its gradient of the logit difference on the corrupted run,
    times (z_clean − z_corrupt), summed per head, over the gap: the lab's figures to 1e-6 of the largest."""
    estimate = attribution.estimate_patching(smollm2, ioi, CLEAN, CORRUPT)
    expected, _ = first_order(smollm2, ioi, CLEAN, CORRUPT)
    got = np.array(estimate.values)
    assert np.abs(got - expected).max() <= 1e-6 * max(1.0, np.abs(expected).max())
    assert estimate.passes.startswith("1 forward + 1 backward")


def test_the_estimate_finds_the_heads_the_exact_patching_finds(smollm2, ioi):
    """The indirect-object prompt: the estimate's top 10 confirmed exactly; the heads that restore most exactly are
    among the estimate's top 10, and its ranking agrees with the exact one (ρ > 0.5) on those heads."""
    estimate = attribution.estimate_patching(smollm2, ioi, CLEAN, CORRUPT)
    top = patching.confirm(estimate)
    exact = patching.patch_heads(smollm2, ioi, top)
    fractions = {head: ioi.fraction(value) for head, value in exact.items()}
    best = max(fractions, key=lambda head: abs(fractions[head]))
    assert abs(fractions[best]) > 0.05
    estimated = [estimate.values[layer][head] for layer, head in top]
    assert spearman([abs(v) for v in estimated], [abs(fractions[h]) for h in top]) > 0.3


def test_the_ablation_estimate_is_its_first_order_definition(smollm2):
    """The zero ablation's estimated loss change by hand: −z · ∂loss/∂z per head, summed over positions."""
    estimate = attribution.estimate_ablation(smollm2, TEXT, 64, "zero")
    model, head_dim, n_layer = smollm2.model, smollm2.head_dim, smollm2.n_layer
    ids = torch.tensor([smollm2.encode(TEXT, 64).ids])
    deltas, inputs, hooks = {}, {}, []
    for layer in range(n_layer):

        def add(_, args, layer=layer):
            deltas[layer] = torch.zeros_like(args[0], requires_grad=True)
            inputs[layer] = args[0].detach()
            return (args[0] + deltas[layer], *args[1:])

        hooks.append(o_proj(model, layer).register_forward_pre_hook(add))
    try:
        with torch.enable_grad():
            logits = model(input_ids=ids).logits[0]
            loss = torch.nn.functional.cross_entropy(logits[:-1].double(), ids[0, 1:])
            grads = torch.autograd.grad(loss, [deltas[i] for i in range(n_layer)])
    finally:
        for hook in hooks:
            hook.remove()
    for layer in (0, 11, 29):
        terms = (-inputs[layer][0].double() * grads[layer][0].double()).view(-1, smollm2.n_head, head_dim)
        expected = terms.sum(dim=(0, 2)).numpy()
        assert np.abs(np.array(estimate.values[layer]) - expected).max() <= 1e-6 * max(1.0, np.abs(expected).max())


def read_by_hand(model, ids: torch.Tensor, layers) -> tuple[dict, torch.Tensor]:
    """This file's own hooks on a Llama-layout model: each of ``layers``' o_proj input (z, (1, T, n_head·hd)) and the
    final norm's input ("final"), and the last position's logits."""
    inputs, hooks = {}, []
    for layer in layers:
        hooks.append(
            o_proj(model, layer).register_forward_pre_hook(lambda _, a, layer=layer: inputs.setdefault(layer, a[0]))
        )
    hooks.append(model.model.norm.register_forward_pre_hook(lambda _, a: inputs.setdefault("final", a[0])))
    try:
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, -1]
    finally:
        for hook in hooks:
            hook.remove()
    return inputs, logits


def test_direct_logit_attribution_by_hand(smollm2):
    """Each head's direct logit of " Mary" at the last position: z_h W_O^h through RMSNorm with this position's scale
    frozen (this file's hooks on the final norm's input) and the LM head's row; the sum check to 1e-4."""
    found = direct_logit_attribution(smollm2, CLEAN, 64, " Mary")
    assert found.norm == "rms" and found.checked and found.check_error < 1e-3
    model, head_dim = smollm2.model, smollm2.head_dim
    inputs, logits = read_by_hand(model, torch.tensor([smollm2.encode(CLEAN, 64).ids]), (3, 29))
    x = inputs["final"][0, -1].double()
    scale = torch.sqrt(x.pow(2).mean() + model.model.norm.variance_epsilon)
    row = model.lm_head.weight[smollm2.token_ids(" Mary")[0]].double() * model.model.norm.weight.double() / scale
    for layer in (3, 29):
        weight = o_proj(model, layer).weight.double()  # (d_model, n_head * head_dim)
        for head in (0, 5):
            part = inputs[layer][0, -1, slice_of(head, head_dim)].double() @ weight[:, slice_of(head, head_dim)].T
            assert float(found.per_head[-1, layer, head]) == pytest.approx(float(part @ row), abs=1e-4)
    assert float(found.reconstructed[-1]) == pytest.approx(float(logits[smollm2.token_ids(" Mary")[0]]), abs=1e-3)
    assert float(found.per_head[-1].sum() + found.rest[-1]) == pytest.approx(float(found.logits[-1]), abs=1e-3)


def test_the_encoders_estimate_and_patching(minilm):
    """MiniLM (no LM head): the estimate is a size per head (≥ 0), patching measures the hidden states' distance, and
    an LM's metric is refused by name."""
    estimate = attribution.estimate_ablation(minilm, TEXT, 64, "mean")
    values = np.array(estimate.values)
    assert values.shape == (minilm.n_layer, minilm.n_head) and (values >= 0).all() and values.max() > 0
    assert "probe" in estimate.passes
    pair = patching.run_pair(minilm, "the cat sat on the mat", "the dog sat on the mat", 64, patching.Metric("hidden"))
    assert pair.clean == 0.0 and pair.corrupt > 0
    got = patching.patch_heads(minilm, pair, [(5, 11)])
    assert 0 <= got[(5, 11)] <= pair.corrupt * 2
    with pytest.raises(ValueError, match="no LM head"):
        patching.run_pair(minilm, "a b", "a c", 64, patching.Metric("loss"))
    with pytest.raises(ValueError, match="LM head"):
        direct_logit_attribution(minilm, TEXT, 64)


def test_the_embedded_model():
    from attnviz.models.embedded.config import EmbeddedConfig
    from attnviz.models.embedded.model import EmbeddedModel

    source = EmbeddedModel(EmbeddedConfig(d_model=32, n_head=4, n_layer=3))
    assert Capability.EDIT_HEADS in source.capabilities
    estimate = attribution.estimate_ablation(source, TEXT, 64, "zero")
    assert np.array(estimate.values).shape == (3, 4)
    sweep = ablation.ablation_sweep(source, TEXT, 64)
    whole = ablation.sweep_baseline(source, TEXT, 64, "zero", timed=False, resume=False)
    alone = ablation.sweep_piece(source, TEXT, whole, [(2, 1)])
    assert sweep.values[2][1] == pytest.approx(alone[(2, 1)], abs=SWEEP_TOLERANCE)
    pair = patching.run_pair(source, "the cat sat", "the dog sat", 64, patching.Metric("hidden"))
    assert pair.corrupt > 0 and patching.patch_heads(source, pair, [(0, 0)])[(0, 0)] >= 0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_other_families_and_bfloat16(tmp_path, smollm2, dtype):
    """GPT-2 (LayerNorm, Conv1D projections, its own layer list) and Qwen2 in each dtype: the resumed sweep equals
    the whole forward within the dtype's rounding, exact patching equals plain pre-hooks on the model's output
    projection and the estimate its first-order definition (tests/integration/patching_reference.py, the same model
    in the same dtype), and the logit's sum check holds."""
    from attnviz.models.hf.loading import load_hf_source
    from attnviz.models.hf.placement import Placement
    from tests.integration import patching_reference as ref

    for family in ("gpt2", "qwen2"):
        folder = ref.tiny_family(tmp_path / family, smollm2, family)
        source = load_hf_source(str(folder), placement=Placement(dtype))
        assert Capability.EDIT_HEADS in source.capabilities
        resumed = ablation.sweep_baseline(source, TEXT, 16, "zero", timed=False)
        whole = ablation.sweep_baseline(source, TEXT, 16, "zero", timed=False, resume=False)
        assert resumed.resume is not None
        heads = [(1, 0), (1, 3)]
        got, expected = (ablation.sweep_piece(source, TEXT, b, heads) for b in (resumed, whole))
        for head in heads:
            assert abs(got[head] - expected[head]) <= sweep_bound(source, dtype), (family, head, got, expected)
        pair = patching.run_pair(source, CLEAN, CORRUPT, 32, patching.Metric("kl"))
        assert pair.clean == 0.0 and pair.corrupt > 0
        pair = patching.run_pair(source, ref.CLEAN, ref.CORRUPT, 32, patching.parse_metric(ref.METRIC))
        ref.check_exact_patching(source, pair, dtype, ref.HEADS[family])
        ref.check_estimate(source, pair, dtype, ref.HEADS[family])
        found = direct_logit_attribution(source, CLEAN, 32)
        assert found.checked, found.check_error
        assert found.norm == ("layer" if family == "gpt2" else "rms")


def sweep_bound(source, dtype: str) -> float:
    """How far the resumed sweep's kl_mean may lie from the whole forward's: float32 issue 29's measured bound; in
    bfloat16 two passes of other batch shapes, each logit within D = derived_bound(bfloat16, the largest |logit| of
    TEXT, the forward's roundings, safety 2) (patching_reference's depth and SAFETY), so each log-softmax within 2D
    and a KL, whose log-ratio moves by 4D and whose weights by 2D relative, within 4D to first order."""
    if dtype == "float32":
        return SWEEP_TOLERANCE
    from tests.integration import patching_reference as ref

    with torch.no_grad():
        logits = source.model(input_ids=torch.tensor([source.encode(TEXT, 16).ids])).logits
    magnitude = float(logits.float().abs().max())
    return 4 * derived_bound(dtype, magnitude, ref.depth(source.model, dtype), ref.SAFETY[dtype])


def test_a_norm_after_the_attention_is_not_read_as_direct(tmp_path, smollm2):
    """Gemma 2 normalises each layer's attention output before the residual stream: a head's direct part is not
    z·W_O, and the logit's attribution says so in one line instead of a map that the sum check would not catch."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    from attnviz.models.hf.loading import load_hf_source
    from tests.integration.tiny_models import tiny

    folder = tiny(tmp_path / "gemma2", smollm2, Gemma2Config, Gemma2ForCausalLM, head_dim=16)
    source = load_hf_source(str(folder))
    with pytest.raises(ValueError, match="passes through Gemma2RMSNorm before it joins the residual stream"):
        direct_logit_attribution(source, CLEAN, 32)
    pair = patching.run_pair(source, CLEAN, CORRUPT, 32, patching.Metric("kl"))  # patching reads z: it stands
    assert pair.corrupt > 0


SCALED = {  # a family that scales in plain arithmetic: its config, and (join c, logit factor s) from that config
    "granite": (
        {"residual_multiplier": 0.22, "logits_scaling": 8.0},
        lambda c: (c.residual_multiplier, 1 / c.logits_scaling),
    ),
    "minicpm3": (  # its attention joins × scale_depth / √layers; its final norm's output is divided before the head
        {
            "scale_depth": 1.4,
            "dim_model_base": 16,
            "q_lora_rank": 32,
            "kv_lora_rank": 16,
            "qk_nope_head_dim": 8,
            "qk_rope_head_dim": 8,
            "v_head_dim": 16,
        },
        lambda c: (c.scale_depth / math.sqrt(c.num_hidden_layers), 1 / c.logits_scaling),
    ),
}


@pytest.mark.parametrize("family", sorted(SCALED))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_scales_applied_without_a_module_are_found_and_applied(tmp_path, smollm2, family, dtype):
    """Granite adds each layer's attention output to the stream times ``residual_multiplier`` and divides its logits
    by ``logits_scaling``; MiniCPM 3 adds it times scale_depth / √layers and divides its final norm's output before
    the LM head: all in arithmetic outside any module. The attribution finds them in the pass and each head's figure
    is its part of the logit by hand (this file's hooks on ``o_proj`` and the final norm, the config's numbers, which
    attnviz never reads); the sum check holds. Before, Granite's check passed with every head 1 / 0.22 times too
    large and failed with its logit scale, and MiniCPM 3 was refused."""
    import transformers

    from attnviz.models.hf.loading import load_hf_source
    from attnviz.models.hf.placement import Placement
    from tests.integration.tiny_models import tiny

    name = {"granite": "Granite", "minicpm3": "MiniCPM3"}[family]
    config_cls, model_cls = getattr(transformers, f"{name}Config"), getattr(transformers, f"{name}ForCausalLM")
    fields, expected_scales = SCALED[family]
    folder = tiny(tmp_path / family, smollm2, config_cls, model_cls, **fields)
    source = load_hf_source(str(folder), placement=Placement(dtype))
    multiplier, factor = expected_scales(source.config)
    found = direct_logit_attribution(source, CLEAN, 32, " Mary")
    assert found.checked, found.check_error
    # the exact sweep forms logits from what the LM head reads only where they are its product alone: not Granite's
    assert (source.unembedding() is None) == (family == "granite")
    low = dtype == "bfloat16"
    assert found.join_scales == pytest.approx([multiplier] * 2, rel=2e-2 if low else 1e-6)
    assert found.logit_scale == pytest.approx(factor, rel=1e-2 if low else 1e-6)
    model = source.model
    inputs, _ = read_by_hand(model, torch.tensor([source.encode(CLEAN, 32).ids], device=source.device), (0, 1))
    token = source.token_ids(" Mary")[0]
    x = inputs["final"][0, -1].double()
    scale = torch.sqrt(x.pow(2).mean() + model.model.norm.variance_epsilon)
    row = model.lm_head.weight[token].double() * model.model.norm.weight.double() / scale * factor
    largest = float(found.per_head[-1].abs().max())
    for layer in (0, 1):
        weight = o_proj(model, layer).weight.double()
        head_dim = weight.shape[1] // source.n_head  # MiniCPM 3's value heads are wider than its query heads
        for head in range(source.n_head):
            part = inputs[layer][0, -1, slice_of(head, head_dim)].double() @ weight[:, slice_of(head, head_dim)].T
            expected = multiplier * float(part @ row)
            assert float(found.per_head[-1, layer, head]) == pytest.approx(
                expected, abs=(3e-2 if low else 1e-6) * largest
            )


def test_standard_models_join_their_attention_unscaled(smollm2):
    """SmolLM2 adds each attention output to the stream as it is: every layer's scale is found and is exactly 1."""
    found = direct_logit_attribution(smollm2, CLEAN, 64, " Mary")
    assert found.join_scales == (1.0,) * 30 and found.logit_scale == 1.0 and not found.scaled


def test_attention_a_text_pass_never_runs_is_not_a_layer(tmp_path, smollm2):
    """TrOCR's decoder (the eager route) holds a cross-attention a text-only pass never calls: its layers are the
    two self-attentions, in the order the pass calls them (they used to be four, by structure, and layer 1 was
    layer 0's unused cross-attention). Ablating layer 1's head 0 equals this file's pre-hook zeroing that head's
    slice of ``layers[1].self_attn.out_proj``; each head's direct logit is its part through that projection."""
    from transformers import TrOCRConfig, TrOCRForCausalLM

    from attnviz.labs.heads_matter.ablation import sweep_baseline, sweep_piece
    from attnviz.models.hf.loading import load_hf_source
    from tests.integration.tiny_models import tiny

    folder = tiny(
        tmp_path / "trocr",
        smollm2,
        TrOCRConfig,
        TrOCRForCausalLM,
        d_model=64,
        decoder_layers=2,
        decoder_attention_heads=4,
        decoder_ffn_dim=128,
        max_position_embeddings=256,
        use_learned_position_embeddings=True,
    )
    source = load_hf_source(str(folder))
    model = source.model
    layers = model.model.decoder.layers
    assert source.route == "eager"
    assert [p.module for p in source.output_projections.layers] == [layer.self_attn.out_proj for layer in layers]
    whole = sweep_baseline(source, TEXT, 16, "zero", timed=False, resume=False)
    got = sweep_piece(source, TEXT, whole, [(1, 0)])[(1, 0)]
    head_dim = source.head_dim

    def zero_head(_, args):
        x = args[0].clone()
        x[..., slice_of(0, head_dim)] = 0
        return (x, *args[1:])

    ids = torch.tensor([source.encode(TEXT, 16).ids])
    with torch.no_grad():
        before = model(input_ids=ids).logits[0]
        handle = layers[1].self_attn.out_proj.register_forward_pre_hook(zero_head)
        try:
            after = model(input_ids=ids).logits[0]
        finally:
            handle.remove()
    assert got == pytest.approx(reference_kl_mean(before, after), abs=1e-6)
    found = direct_logit_attribution(source, TEXT, 16)
    assert found.checked and found.per_head.shape == (len(ids[0]), 2, 4)


def test_one_token_and_the_longest_input(smollm2):
    """One token: no loss to estimate (one line), but patching by logit difference and the logit's attribution run.
    The longest input the estimate reads (ESTIMATE_TOKENS) is what it reads of a longer text."""
    with pytest.raises(ValueError, match="at least 2 tokens"):
        attribution.estimate_ablation(smollm2, "Hi", 1, "zero")
    pair = patching.run_pair(smollm2, "Mary", "John", 1, patching.parse_metric("logit-diff: Mary, John"))
    assert pair.n_tokens == 1
    assert direct_logit_attribution(smollm2, "Hi", 1).per_head.shape == (1, 30, 9)
    from attnviz.settings import ESTIMATE_TOKENS

    long_text = " ".join(["word"] * (ESTIMATE_TOKENS + 50))
    estimate = attribution.estimate_ablation(smollm2, long_text, ESTIMATE_TOKENS, "mean")
    assert np.isfinite(np.array(estimate.values)).all()

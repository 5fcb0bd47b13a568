"""The embedded model's one hooked pass: its points, where it starts and stops, and the labs handed to it giving
exactly what the per-lab block loops they replaced gave (those loops are kept here as the specification)."""

import math

import pytest
import torch

from attnviz.core.attention import fused_attention
from attnviz.core.capture import CaptureSession
from attnviz.models.ablation import ablate_output, ablation_hooks, heads_of
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.hooked import HOOK_POINTS
from attnviz.models.embedded.model import EmbeddedModel, source_text
from attnviz.models.hf.attention import MaskOverride, ReferenceRun
from attnviz.models.source import Capability, PassResult

TEXT = "When Mary and John went to the store, John gave a drink to"


@pytest.fixture(scope="module", params=[False, True], ids=["bidirectional", "causal"])
def model(request):
    return EmbeddedModel(EmbeddedConfig(d_model=48, n_head=6, n_kv_head=3, n_layer=3, causal=request.param))


def words(model: EmbeddedModel, rows: int = 1) -> list[list[str]]:
    return [[source_text(t) for t in model.encode(TEXT, 64).tokens]] * rows


def old_loop(model: EmbeddedModel, rows: int, edit, start: int = 0, cache=None) -> torch.Tensor:
    """The block loop ablated_outputs and head_pass ran before the one pass: the fused path under the model's
    mask, z handed to ``edit`` before W_O, from block ``start`` of ``cache`` on."""
    tokens = words(model, rows)
    T = len(tokens[0])
    with torch.no_grad():
        if start:
            x = cache.outputs[start - 1].expand(rows, -1, -1).contiguous()
        else:
            x = model.embed(tokens, torch.arange(T)[None].repeat(rows, 1))
        mask = model._keys(T).dense()
        scale = 1.0 / math.sqrt(model.head_dim)
        for layer, block in enumerate(model.blocks[start:], start):

            def attend(q, k, v, layer=layer):
                out = fused_attention(q, k, v, mask, scale).transpose(1, 2)
                return edit(layer, out, v).transpose(1, 2)

            x, _ = block(x, attend=attend)
    return x


def test_each_point_is_called_once_per_layer_with_its_shapes(model):
    calls = []
    B, T = 2, len(words(model)[0])
    hd = model.head_dim

    def seen(point):
        def hook(layer, *tensors):
            calls.append((point, layer, tuple(tuple(t.shape) for t in tensors)))
            return tensors[0] if point == "attn.z" else None

        return hook

    hooks = {point: seen(point) for point in ("attn.qkv", "attn.z", "attn.pattern", "resid.pre", "resid.post")}
    result = model.run_hooked(words(model, B), hooks)
    assert isinstance(result, PassResult)
    expected = {
        "attn.qkv": ((B, 6, T, hd), (B, 3, T, hd), (B, 3, T, hd)),
        "attn.z": ((B, T, 6, hd),),
        "attn.pattern": ((B, 6, T, T),),
        "resid.pre": ((B, T, 48),),
        "resid.post": ((B, T, 48),),
    }
    for point, shapes in expected.items():
        assert [(layer, s) for p, layer, s in calls if p == point] == [(layer, shapes) for layer in range(3)]
    assert result.output.shape == (B, T, 48) and result.hidden is result.output
    assert (result.layers_run, result.stopped, result.layer_starts, result.read) == (3, False, {0: 0, 1: 1, 2: 2}, None)


def test_its_points_and_the_capabilities_read_from_them(model):
    assert model.hook_points == HOOK_POINTS == {"attn", "attn.qkv", "attn.z", "attn.pattern", "resid.pre", "resid.post"}
    expected = {Capability.KEEP_QK, Capability.VALUE_NORMS, Capability.MASK, Capability.ABLATE, Capability.EDIT_HEADS}
    assert model.capabilities == frozenset(expected | ({Capability.KV_CACHE} if model.causal else set()))


@pytest.mark.parametrize("point", ["attn.in", "norm.final", "unembed.in", "logits", "read_out", "blocks.0.hook_z"])
def test_a_point_it_lacks_is_refused(model, point):
    with pytest.raises(ValueError, match=f"no hook point '{point}'"):
        model.run_hooked(words(model), {point: lambda *args: None})


def test_what_it_cannot_do_is_refused(model):
    _, cache = model.layer_cache(TEXT, 64)
    tokens = words(model)
    with pytest.raises(ValueError, match="attn point takes"):
        model.run_hooked(tokens, {"attn": "eager"})
    with pytest.raises(ValueError, match="no full weights"):
        session = CaptureSession(1, len(tokens[0]), 18, True)
        model.run_hooked(tokens, {"attn": session, "attn.pattern": lambda layer, w: None})
    wrong = [  # no cache to start from, no layer run, past the last layer
        {"start_at_layer": 1},
        {"stop_at_layer": 0},
        {"stop_at_layer": 4},
        {"start_at_layer": 3, "resume": cache},
        {"start_at_layer": 2, "stop_at_layer": 2, "resume": cache},
    ]
    for options in wrong:
        with pytest.raises(ValueError, match="a pass from layer"):
            model.run_hooked(tokens, {}, **options)


@pytest.mark.parametrize("stop", [1, 2])
def test_stop_at_layer_returns_that_layers_output(model, stop):
    kept = {}
    model.run_hooked(words(model), {"resid.post": lambda layer, x: kept.setdefault(layer, x)})
    ran = []
    result = model.run_hooked(words(model), {"resid.pre": lambda layer, x: ran.append(layer)}, stop_at_layer=stop)
    assert torch.equal(result.output, kept[stop - 1])
    assert result.stopped and result.hidden is None and result.layers_run == stop and ran == list(range(stop))


@pytest.mark.parametrize("start", [1, 2])
def test_start_at_layer_with_the_texts_cache_equals_the_whole_pass(model, start):
    whole_outputs, cache = model.layer_cache(TEXT, 64)
    half = {"attn.z": lambda layer, z: z * 0.5 if layer >= start else z}
    whole = model.run_hooked(words(model, 3), half)
    ran = []
    resumed = model.run_hooked(
        words(model, 3), {**half, "resid.pre": lambda layer, x: ran.append(layer)}, resume=cache, start_at_layer=start
    )
    assert torch.equal(resumed.output, whole.output) and ran == list(range(start, 3))
    assert resumed.layers_run == 3 and resumed.layer_starts == {layer: layer for layer in range(start, 3)}
    plain = model.run_hooked(words(model), {}, resume=cache, start_at_layer=start).output
    assert torch.equal(plain[0].float().cpu(), whole_outputs.values[0])


@pytest.mark.parametrize("mode", ["zero", "mean", "first"])
def test_ablation_through_the_pass_equals_the_old_block_loop(model, mode):
    rows = [[], [(0, 1)], [(1, 2), (2, 0)], [(2, 5), (1, 1)]]

    def ablate(layer, out, v):
        return ablate_output(out, v, heads_of(rows, model.n_head, layer, out.shape[0]), mode)

    expected = old_loop(model, len(rows), ablate)
    through = model.run_hooked(words(model, len(rows)), ablation_hooks(rows, mode, model.n_head)).output
    assert torch.equal(through, expected)
    assert torch.equal(model.ablated_outputs(TEXT, 64, rows, mode).values, expected.float().cpu())
    _, cache = model.layer_cache(TEXT, 64, mode)
    later = rows[2:]  # their earliest layer is 1: the passes resume there

    def ablate_later(layer, out, v):
        return ablate_output(out, v, heads_of(later, model.n_head, layer, out.shape[0]), mode)

    resumed = model.ablated_outputs(TEXT, 64, later, mode, resume=cache).values
    assert torch.equal(resumed, old_loop(model, len(later), ablate_later, start=1, cache=cache).float().cpu())


def test_head_pass_edits_z_as_the_old_loop_did_and_keeps_a_graph_when_asked(model):
    encoding = model.encode(TEXT, 64)
    edit = lambda layer, z: z * (layer + 1.0)  # noqa: E731
    out, read = model.head_pass(encoding, 2, edit)
    assert read is None and not out.requires_grad
    assert torch.equal(out, old_loop(model, 2, lambda layer, z, v: edit(layer, z)))
    graph, _ = model.head_pass(encoding, 2, edit, grad=True)
    assert graph.requires_grad and torch.equal(graph.detach(), out)


def test_the_mask_override_and_the_reference_take_the_inspectable_path_under_their_masks(model):
    tokens = words(model)
    T = len(tokens[0])
    full = torch.ones(T, T, dtype=torch.bool)
    x = model.embed(tokens, torch.arange(T)[None])
    own = model._keys(T).dense()
    expected_states, expected_weights = x, []
    with torch.no_grad():
        for block in model.blocks:  # what states_under_mask and reference_weights ran before the one pass
            expected_states, _ = block(expected_states, full)
        y = x
        for block in model.blocks:
            y, weights = block(y, own)
            expected_weights.append(weights)
    assert torch.equal(model.run_hooked(tokens, {"attn": MaskOverride(full)}).output, expected_states)
    reference, seen = ReferenceRun(), []
    model.run_hooked(tokens, {"attn": reference, "attn.pattern": lambda layer, w: seen.append(w)})
    assert all(torch.equal(a, b) for a, b in zip(seen, expected_weights, strict=True))
    assert len(reference.keys) == 3 and all(torch.equal(keys[0].dense(), own) for keys in reference.keys)
    assert torch.equal(model.reference_weights(TEXT, 64), torch.stack([w[0] for w in expected_weights]))


def test_the_capture_is_the_attn_point(model):
    tokens = words(model)
    T = len(tokens[0])
    x = model.embed(tokens, torch.arange(T)[None])
    session = CaptureSession(1, T, model.n_layer * model.n_head, True)
    qs = []
    result = model.run_hooked(x, {"attn": session, "attn.qkv": lambda layer, q, k, v: qs.append(q[0])})
    record = model.run(TEXT, 64)
    assert torch.equal(result.output[0], record.outputs.hidden)
    assert all(torch.equal(q, layer.q) for q, layer in zip(qs, record.layers, strict=True))
    assert all(torch.equal(a.q, b.q) for a, b in zip(session.layers[0], record.layers, strict=True))

"""The one hooked pass (attnviz.models.hf.points) on a small model of plain modules: points found once, hooks that
act only in their own pass, layers numbered as a whole pass numbers them, start and stop mid-model."""

import threading

import pytest
import torch
from torch import nn

from attnviz.models.ablation import ablation_hooks
from attnviz.models.hf import points
from attnviz.models.resume import cached_layers

N_HEAD, HEAD_DIM, WIDTH = 2, 3, 6


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.o_proj = nn.Linear(WIDTH, WIDTH, bias=False)
        self.runs = 0

    def forward(self, x):
        self.runs += 1
        return x + self.o_proj(torch.tanh(x))  # the "heads" are tanh(x): what W_O reads


class Tiny(nn.Module):
    def __init__(self, n_layer: int = 3) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.ModuleList(Block() for _ in range(n_layer))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def hook_map(model: Tiny) -> points.HookMap:
    projections = tuple((layer.o_proj, N_HEAD, HEAD_DIM) for layer in model.layers)
    return points.HookMap(model=model, interface=False, projections=projections, layers=tuple(model.layers))


def test_a_pass_ablates_in_its_own_context_only_and_leaves_the_model_as_it_was():
    model = Tiny()
    found = hook_map(model)
    x = torch.randn(1, 4, WIDTH)
    before = model(x)
    other: list[torch.Tensor] = []

    def call():
        thread = threading.Thread(target=lambda: other.append(model(x)))  # another session, during the pass
        thread.start()
        thread.join()
        return model(x)

    ablated = points.run(found, call, ablation_hooks([[(1, 0)]], "zero", N_HEAD)).output
    # by hand: layer 1's head 0 (its first HEAD_DIM inputs of W_O) zeroed
    h = model.layers[0](x)
    z = torch.tanh(h).clone()
    z[..., :HEAD_DIM] = 0
    h = h + model.layers[1].o_proj(z)
    expected = model.layers[2](h)
    assert torch.equal(ablated, expected) and not torch.equal(ablated, before)
    assert torch.equal(other[0], before)  # the other context's pass ran the model untouched
    assert torch.equal(model(x), before)  # and nothing is left behind


def test_points_are_installed_once_per_module():
    model = Tiny()
    hook_map(model)
    hook_map(model)  # a second map of the same model adds no second hook
    assert [len(layer.o_proj._forward_pre_hooks) for layer in model.layers] == [1, 1, 1]


def test_a_point_the_model_lacks_is_refused():
    model = Tiny()
    with pytest.raises(ValueError, match=r"attn\.qkv"):
        points.run(hook_map(model), lambda: model(torch.zeros(1, 1, WIDTH)), {"attn.qkv": lambda *a: None})


def test_start_at_layer_reuses_the_cache_and_numbers_layers_as_the_whole_pass():
    model = Tiny()
    found = hook_map(model)
    x = torch.randn(1, 5, WIDTH)
    outputs, order = {}, []

    def keep(layer, output):
        outputs[layer] = output
        order.append(layer)

    whole = points.run(found, lambda: model(x), {"resid.post": keep})
    cache = cached_layers(3, outputs, order, whole.layer_starts, whole.layers_run)
    assert cache.calls_before == [0, 1, 2] and whole.layers_run == 3
    seen: list[int] = []

    def edit(layer, z):
        seen.append(layer)
        return z

    runs = [layer.runs for layer in model.layers]
    resumed = points.run(found, lambda: model(x), {"attn.z": edit}, resume=cache, start_at_layer=2)
    assert [layer.runs for layer in model.layers] == [runs[0], runs[1], runs[2] + 1]  # layers 0 and 1 skipped
    assert seen == [2] and resumed.layers_run == 3  # only layer 2 ran, numbered 2 as in the whole pass
    assert torch.equal(resumed.output, whole.output)  # the same arithmetic: bit for bit
    wide = points.run(found, lambda: model(x.expand(2, -1, -1)), resume=cache, start_at_layer=2, batch=2)
    assert wide.output.shape == (2, 5, WIDTH)  # the cached output widened to the pass's rows


def test_stop_at_layer_returns_what_that_layer_returned():
    model = Tiny()
    x = torch.randn(1, 2, WIDTH)
    stopped = points.run(hook_map(model), lambda: model(x), stop_at_layer=2)
    assert stopped.stopped and torch.equal(stopped.output, model.layers[1](model.layers[0](x)))


class Normed(Tiny):
    """Tiny with a final norm, as the read-outs' probe finds it."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)

    def forward(self, x):
        return self.norm(super().forward(x))


def test_a_map_with_the_final_norm_serves_norm_final_and_numbers_layers_as_the_map_it_came_from():
    import dataclasses

    model = Normed()
    found = hook_map(model)
    with_norm = dataclasses.replace(found, final_norm=model.norm)  # what the read-outs' probe pass returns
    assert "norm.final" in with_norm.points and "norm.final" not in found.points
    assert with_norm._z_index == found._z_index  # built afresh, not appended to: each layer numbered once
    x = torch.randn(1, 4, WIDTH)
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    layers: list[int] = []

    def keep(layer, z):
        layers.append(layer)
        return z

    out = points.run(with_norm, lambda: model(x), {"norm.final": lambda r, y: seen.append((r, y)), "attn.z": keep})
    residual = model.layers[2](model.layers[1](model.layers[0](x)))
    assert len(seen) == 1 and torch.equal(seen[0][0], residual) and torch.equal(seen[0][1], out.output)
    assert layers == [0, 1, 2]
    with pytest.raises(ValueError, match=r"norm\.final"):  # the map without the norm has no such point
        points.run(found, lambda: model(x), {"norm.final": lambda r, y: None})
    model(x)  # outside a pass the norm's hook does nothing
    assert len(seen) == 1

"""AtP*'s GradDrop against its definition, computed here with plain autograd and this file's own hooks on a small
random Llama (3 layers): for each layer ℓ a fresh forward in which layer ℓ's attention output (its o_proj input) is
detached, so no gradient flows back through it, and a head's score is Σ_ℓ |Σ_t change · ∂M/∂z| / (L − 1)."""

import numpy as np
import pytest
import torch

from attnviz.labs.heads_matter import attribution, patching
from tests.integration.tiny_models import tiny
from tests.tolerances import derived_bound, forward_depth

N_LAYER, D_MODEL, D_FF = 3, 64, 128
TEXT = "The cat sat on the mat because it was warm and soft."
CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


@pytest.fixture(scope="module")
def llama(tmp_path_factory, smollm2):
    from transformers import LlamaConfig, LlamaForCausalLM

    from attnviz.models.hf.loading import load_hf_source

    folder = tiny(
        tmp_path_factory.mktemp("graddrop") / "llama",
        smollm2,
        LlamaConfig,
        LlamaForCausalLM,
        num_hidden_layers=N_LAYER,
        initializer_range=0.2,  # heads that differ, and later layers that matter to earlier ones
    )
    return load_hf_source(str(folder))


def o_proj(model, layer):
    return model.model.layers[layer].self_attn.o_proj


def run_by_hand(model, ids: list[int], dropped: int | None, metric) -> tuple[dict, list[torch.Tensor]]:
    """One forward of ``ids`` with a zero added to every o_proj input (z, (1, T, n_head·head_dim)); layer
    ``dropped``'s input detached after it (no gradient through that layer's attention output); the z read and
    ∂metric/∂z per layer (zero where none flows)."""
    deltas, inputs, hooks = {}, {}, []
    for layer in range(N_LAYER):

        def add(_, args, layer=layer):
            deltas[layer] = torch.zeros_like(args[0], requires_grad=True)
            inputs[layer] = args[0].detach()
            edited = args[0] + deltas[layer]
            return (edited.detach() if layer == dropped else edited, *args[1:])

        hooks.append(o_proj(model, layer).register_forward_pre_hook(add))
    try:
        with torch.enable_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0]
            grads = torch.autograd.grad(metric(logits), [deltas[i] for i in range(N_LAYER)], allow_unused=True)
    finally:
        for hook in hooks:
            hook.remove()
    return inputs, [torch.zeros_like(deltas[i]) if g is None else g for i, g in enumerate(grads)]


def graddrop_by_hand(source, ids: list[int], change, metric, scale: float = 1.0) -> np.ndarray:
    """GradDrop's score per head (n_layer, n_head) by its definition, one fresh forward and backward per dropped
    layer; ``change(layer, z)`` the head's change (T, n_head·head_dim)."""
    n_head, head_dim = source.n_head, source.head_dim
    total = np.zeros((N_LAYER, n_head))
    for dropped in range(N_LAYER):
        inputs, grads = run_by_hand(source.model, ids, dropped, metric)
        for layer in range(N_LAYER):
            terms = (change(layer, inputs[layer][0]).double() * grads[layer][0].double()).view(-1, n_head, head_dim)
            total[layer] += terms.sum(dim=(0, 2)).abs().numpy()
    return total / (N_LAYER - 1) / abs(scale)


def bound(expected: np.ndarray) -> float:
    """Two float32 backward passes of the same model, one on a graph kept for several backwards and one fresh, with
    the hook that drops a layer's gradient placed otherwise: a score sums L terms of a forward's depth."""
    return derived_bound("float32", float(np.abs(expected).max()), N_LAYER * forward_depth(N_LAYER, D_MODEL, D_FF))


def test_the_ablation_estimates_graddrop_is_its_definition(llama):
    estimate = attribution.estimate_ablation(llama, TEXT, 64, "zero", graddrop=True)
    ids = llama.encode(TEXT, 64).ids

    def loss(logits):
        return torch.nn.functional.cross_entropy(logits[:-1].double(), torch.tensor(ids[1:]))

    expected = graddrop_by_hand(llama, ids, lambda layer, z: -z, loss)
    got = np.array(estimate.graddrop)
    assert np.abs(got - expected).max() <= bound(expected)
    plain = np.abs(np.array(estimate.values))
    # the definition's own shape: the last layer's heads have nothing after them to drop, so their score is their
    # |estimate| (L − 1 unchanged terms over L − 1); an earlier head's is not (the test fails if nothing is dropped)
    assert np.abs(got[-1] - plain[-1]).max() <= bound(expected)
    assert np.abs(got[0] - plain[0]).max() > 100 * bound(expected)
    assert estimate.passes == f"1 forward + 1 backward + {N_LAYER} backward (GradDrop)"
    plain_estimate = attribution.estimate_ablation(llama, TEXT, 64, "zero")
    assert plain_estimate.graddrop is None and "graddrop" not in plain_estimate.to_json()
    assert plain_estimate.values == estimate.values  # the option adds backwards; the estimate itself is the same


def test_the_patching_estimates_graddrop_is_its_definition(llama):
    metric = patching.parse_metric("logit-diff: Mary, John")
    pair = patching.run_pair(llama, CLEAN, CORRUPT, 64, metric)
    estimate = attribution.estimate_patching(llama, pair, CLEAN, CORRUPT, graddrop=True)
    mary, john = pair.metric.ids
    clean_z, _ = run_by_hand(llama.model, llama.encode(CLEAN, 64).ids, None, lambda logits: logits[-1, mary])

    def logit_diff(logits):
        return logits[-1, mary] - logits[-1, john]

    expected = graddrop_by_hand(
        llama, llama.encode(CORRUPT, 64).ids, lambda layer, z: clean_z[layer][0] - z, logit_diff, pair.gap
    )
    got = np.array(estimate.graddrop)
    assert np.abs(got - expected).max() <= bound(expected)
    assert np.abs(got[0] - np.abs(np.array(estimate.values[0]))).max() > 100 * bound(expected)
    assert set(estimate.graddrop_flagged) == set(attribution.graddrop_flags(estimate.values, estimate.graddrop))

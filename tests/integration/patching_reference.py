"""Activation patching and attribution patching computed with plain torch hooks on a transformers model and none of
attnviz's code: the references for attnviz.labs.heads_matter.patching and attnviz.labs.heads_matter.attribution, on the tiny random models
they run on, with the bounds of a float32 or bfloat16 forward.

A head is patched by a pre-hook on the model's own output projection (Llama's and Qwen2's ``o_proj``, GPT-2's
Conv1D ``c_proj``), whose input holds each head's output in its own slice; attribution patching is its first-order
definition, by autograd: a zero added to every projection input of the corrupted run, the gradient of the metric at
it, times (x_clean − x_corrupt), summed per head over positions and the head's slice, over the gap.

The lab's batched, resumed passes and these single passes are the same model in the same dtype in other batch
shapes: they differ by rounding alone (tests/tolerances.py's derived_bound), over the depth of one logit's roundings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tests.tolerances import derived_bound, forward_depth

CLEAN, CORRUPT = "John to", "Mary to"  # two tokens: one head's patch moves the logit difference far past bfloat16's
METRIC = "logit-diff: Mary, John"
INIT = 0.2  # the tiny models' initializer range: weights large enough that a head moves a logit by a good part of it
# Per family, heads whose patch moves the logit difference past the bfloat16 bound (measured at INIT, "John to").
HEADS = {"llama": [(0, 3), (1, 2)], "gpt2": [(0, 0), (1, 2)], "qwen2": [(1, 1), (1, 3)]}
# In bfloat16 every matmul accumulates in float32 (2**16 times finer, negligible) and rounds its output once, as
# does every elementwise op: about 20 roundings to bfloat16 per layer on one logit's path (a Llama layer: 2 for each
# RMSNorm, the q/k/v projection, 3 for RoPE, scores, scaling, softmax, weights × values, o_proj, the residual add,
# gate and up, the activation, its product, down, the residual add; GPT-2's tanh GELU as many), plus 3 after them.
BF16_ROUNDINGS_PER_LAYER = 20
# derived_bound's eps is twice round-to-nearest's largest step, and n independent steps walk σ = eps·√n/(2√3): a
# safety of 2 is 7σ. In bfloat16 that is the whole story (one rounding per element per op, however a kernel blocks its
# float32 sums); in float32 the depth counts a sum's roundings term by term, and a kernel that blocks the sum
# another way rounds partial sums of many terms at once: 10.
SAFETY = {"float32": 10.0, "bfloat16": 2.0}


def tiny_family(folder: Path, smollm2, family: str) -> Path:
    """A tiny random model of ``family`` ("llama", "gpt2", "qwen2"): 2 layers of 4 heads, hidden 64, weights drawn
    at :data:`INIT`, saved with SmolLM2's tokenizer."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from tests.integration.tiny_models import tiny

    if family == "gpt2":
        sizes = {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 256}
        return tiny(folder, smollm2, GPT2Config, GPT2LMHeadModel, initializer_range=INIT, **sizes)
    classes = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[family]
    return tiny(folder, smollm2, *classes, initializer_range=INIT)


def projections(model) -> list[torch.nn.Module]:
    """Each layer's attention output projection, whose input holds every head's output in its slice."""
    if hasattr(model, "transformer"):  # GPT-2
        return [block.attn.c_proj for block in model.transformer.h]
    return [layer.self_attn.o_proj for layer in model.model.layers]


def depth(model, dtype: str) -> int:
    """The roundings that feed one logit of ``model``'s forward in ``dtype``: float32 rounds each addition of every
    sum (:func:`tests.tolerances.forward_depth`), bfloat16 each op's output (:data:`BF16_ROUNDINGS_PER_LAYER`)."""
    config = model.config
    n_layer = config.num_hidden_layers
    if dtype == "bfloat16":
        return BF16_ROUNDINGS_PER_LAYER * n_layer + 3
    d_ff = getattr(config, "n_inner", None) if hasattr(config, "n_embd") else config.intermediate_size
    return forward_depth(n_layer, config.hidden_size, d_ff)


def ids(source, text: str) -> torch.Tensor:
    return torch.tensor([source.encode(text, 32).ids])  # (1, T)


def patched_logits(source, projection, cut: slice, positions: slice | list[int] = slice(None)) -> torch.Tensor:
    """The corrupted text's last logits (vocab,) float64, with ``cut`` of ``projection``'s input at ``positions``
    (default every one) taken from the clean text's pass: one pre-hook reads it, another writes it, each on a single
    pass."""
    kept = {}
    hook = projection.register_forward_pre_hook(lambda _, args: kept.setdefault("x", args[0].clone()))
    try:
        with torch.no_grad():
            source.model(input_ids=ids(source, CLEAN))
    finally:
        hook.remove()

    def patch(_, args):
        x = args[0].clone()
        x[:, positions, cut] = kept["x"][:, positions, cut]  # (1, T, n_head * head_dim): one head's slice
        return (x, *args[1:])

    hook = projection.register_forward_pre_hook(patch)
    try:
        with torch.no_grad():
            return source.model(input_ids=ids(source, CORRUPT)).logits[0, -1].double()
    finally:
        hook.remove()


def logit_size(last: torch.Tensor, tokens) -> float:
    """The size at which the logit difference of ``tokens`` rounds: each of its two logits is the final hidden state
    through one unembedding row, all rows of a size, so the larger of those two logits and a typical one (the RMS
    over the vocabulary)."""
    return max(float(last.pow(2).mean().sqrt()), *(abs(float(last[t])) for t in tokens))


@dataclass(frozen=True)
class Checked:
    """What a check measured: the worst |lab − reference|, the bound, and the smallest effect over its bound."""

    worst: float
    bound: float
    margin: float


def check_exact_patching(source, pair, dtype: str, heads) -> Checked:
    """patching.patch_heads on ``heads`` against :func:`patched_logits`: within two logits' rounding (each at
    :func:`logit_size`, over :func:`depth`), and each effect (patched − corrupt) past that bound."""
    from attnviz.labs.heads_matter import patching

    got = patching.patch_heads(source, pair, heads)
    tokens = pair.metric.ids
    head_dim, n_depth = source.head_dim, depth(source.model, dtype)
    worst, top, margin = 0.0, 0.0, float("inf")
    for layer, head in heads:
        last = patched_logits(source, projections(source.model)[layer], slice(head * head_dim, (head + 1) * head_dim))
        expected = float(last[tokens[0]] - last[tokens[1]])
        bound = 2 * derived_bound(dtype, logit_size(last, tokens), n_depth, SAFETY[dtype])
        assert abs(got[(layer, head)] - expected) <= bound, (dtype, layer, head, got[(layer, head)], expected, bound)
        effect = abs(expected - pair.corrupt)
        assert effect > bound, (dtype, layer, head, effect, bound)  # a lab that patched nothing would fail
        worst, top, margin = (
            max(worst, abs(got[(layer, head)] - expected)),
            max(top, bound),
            min(margin, effect / bound),
        )
    return Checked(worst, top, margin)


def first_order(source, pair, clean: str = CLEAN, corrupt: str = CORRUPT) -> tuple[np.ndarray, np.ndarray]:
    """Attribution patching by hand on ``clean`` and ``corrupt`` (``pair``'s texts): (each head's estimate, each
    head's sum of |terms|), both over the gap, (n_layer, n_head) float64."""
    model, mods = source.model, projections(source.model)
    tokens = pair.metric.ids
    n_layer, n_head, head_dim = source.n_layer, source.n_head, source.head_dim
    inputs, grads = {}, {}
    for name, text in (("clean", clean), ("corrupt", corrupt)):
        deltas, hooks = {}, []
        for layer in range(n_layer):

            def add(_, args, layer=layer, deltas=deltas, name=name):
                deltas[layer] = torch.zeros_like(args[0], requires_grad=True)
                inputs[(name, layer)] = args[0].detach()
                return (args[0] + deltas[layer], *args[1:])

            hooks.append(mods[layer].register_forward_pre_hook(add))
        try:
            with torch.enable_grad():
                logits = model(input_ids=ids(source, text)).logits[0, -1]  # (vocab,)
                found = torch.autograd.grad(logits[tokens[0]] - logits[tokens[1]], [deltas[i] for i in range(n_layer)])
        finally:
            for hook in hooks:
                hook.remove()
        grads[name] = found
    expected, scale = np.zeros((n_layer, n_head)), np.zeros((n_layer, n_head))
    for layer in range(n_layer):
        change = (inputs[("clean", layer)] - inputs[("corrupt", layer)])[0].double()  # (T, n_head * head_dim)
        terms = (change * grads["corrupt"][layer][0].double()).view(change.shape[0], n_head, head_dim)
        expected[layer] = terms.sum(dim=(0, 2)).numpy() / pair.gap
        scale[layer] = terms.abs().sum(dim=(0, 2)).numpy() / abs(pair.gap)
    return expected, scale


def check_estimate(source, pair, dtype: str, heads) -> Checked:
    """attribution.estimate_patching against :func:`first_order`, every head: each gradient is a forward and a
    backward in ``dtype`` (about twice :func:`depth`'s roundings; the terms are summed in float64 on both sides), so a
    head's figure is off by eps × the sum of its terms' sizes × √(2 depth); ``heads``' figures lie past their bound."""
    from attnviz.labs.heads_matter import attribution

    estimate = attribution.estimate_patching(source, pair, CLEAN, CORRUPT)
    expected, scale = first_order(source, pair)
    got = np.array(estimate.values)
    n_depth = 2 * depth(source.model, dtype)
    bound = np.vectorize(lambda s: derived_bound(dtype, float(s), n_depth, SAFETY[dtype]))(scale)
    diff = np.abs(got - expected)
    assert (diff <= bound).all(), (dtype, diff.max(), bound[np.unravel_index(diff.argmax(), diff.shape)])
    margins = [abs(expected[h]) / bound[h] for h in heads]
    assert min(margins) > 1, (dtype, heads, margins)  # the figures are past rounding: the check can fail
    return Checked(float(diff.max()), float(bound.max()), float(min(margins)))

"""Each head's direct contribution to one token's logit, computed with plain torch hooks on a transformers model and
none of attnviz's code: the reference for attnviz.labs.heads_matter.direct_logits.

A head's part of the residual stream is its slice of the output projection's input, z_h (head_dim,), through its
columns of W_O (Linear: weight[:, slice]; GPT-2's Conv1D: weight[slice, :]), times the join scale c the config
states (Granite's ``residual_multiplier``, MiniCPM's ``scale_depth / √n_layer``, else 1). The final norm is read in
the real forward with its per-position scale frozen: σ_t from what entered it (RMS, or the standard deviation for a
centring norm, with the module's epsilon), and of the stored gains (w, Gemma's 1 + w, none) the one that reproduces
what left it. Between that norm's output and the logits, two scalars are read from the same forward: k, the LM
head's input over the norm's output (MiniCPM 3 divides before the head), and s, the model's logits over the LM
head's output (Granite, Cohere). A head's figure at position t: c · frozen_t(z_h W_O^h) · k · U_y · s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

# Both sides compute in float64 from the same z, W_O, stream, norm gain and LM head row; they differ only where a
# value is read rather than stored: the reference takes the join scale from the config and reads k and s as ratios
# of tensors rounded in the dtype (each to about eps), attnviz fits the join and the logit scales (each to its eps).
# So each head's figure agrees to eps(dtype) × the sum of |products| behind it × (the 4 scales read), with a safety
# factor of 2: 8 eps. No √depth: the sums run in float64, and this bound adds every element's error.
SAFETY = 8


def per_head_bound(magnitude: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The bound on |attnviz − reference| per head: SAFETY × eps(dtype) × the magnitude behind each figure."""
    return SAFETY * torch.finfo(dtype).eps * magnitude


def join_scale_of(config) -> float:
    """c in r + c·o, as the config states it (attnviz reads it by data flow instead)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(text, "residual_multiplier", None) is not None:
        return float(text.residual_multiplier)
    if getattr(text, "scale_depth", None) is not None:
        return float(text.scale_depth) / math.sqrt(text.num_hidden_layers)
    return 1.0


@dataclass
class Reference:
    """per_head: (T, n_layer, n_head) float64, each head's figure; magnitude: (T, n_layer, n_head), the sum of the
    absolute products behind each figure (what a rounding of the inputs is relative to); logits: (T,) the model's
    own logit of the token; token_id."""

    per_head: Tensor
    magnitude: Tensor
    logits: Tensor
    token_id: int


def _is_norm(module: nn.Module) -> bool:
    return isinstance(module, nn.LayerNorm) or "norm" in type(module).__name__.lower()


def _centres(module: nn.Module) -> bool:
    name = type(module).__name__.lower()
    return isinstance(module, nn.LayerNorm) or ("layernorm" in name and "rms" not in name)


def reference_direct_logits(
    model: nn.Module,
    input_ids: Tensor,
    projections: list[nn.Module],
    n_head: int,
    token_id: int | None = None,
) -> Reference:
    """Every head's direct contribution to ``token_id``'s logit (default: the top next token at the last position)
    at every position of ``input_ids`` (1, T); ``projections``: the attention output projections, each called once a
    layer (a module called by several layers is hooked once and numbered by call)."""
    z_calls: list[Tensor] = []
    last_norm: list[tuple[nn.Module, Tensor, Tensor]] = []
    head_io: dict[str, Tensor] = {}
    head = model.get_output_embeddings()
    hooks = []

    def z_hook(_, args):
        z_calls.append(args[0][0].detach().double())  # (T, n_head * head_dim)

    def norm_hook(module, args, output):
        if "head_in" not in head_io and isinstance(output, Tensor) and args and isinstance(args[0], Tensor):
            last_norm[:] = [(module, args[0][0].detach().double(), output[0].detach().double())]

    def head_in(_, args):
        head_io["head_in"] = args[0][0].detach().double()

    def head_out(_, args, output):
        head_io["head_out"] = output[0].detach().double()

    for module in {id(p): p for p in projections}.values():
        hooks.append(module.register_forward_pre_hook(z_hook))
    for module in model.modules():
        if _is_norm(module) and not list(module.children()):
            hooks.append(module.register_forward_hook(norm_hook))
    hooks.append(head.register_forward_pre_hook(head_in))
    hooks.append(head.register_forward_hook(head_out))
    try:
        with torch.no_grad():
            logits = model(input_ids=input_ids).logits[0].detach().double()  # (T, vocab)
    finally:
        for hook in hooks:
            hook.remove()
    norm, x, y = last_norm[0]  # the last norm before the LM head: (T, d_model) each
    eps = next((float(getattr(norm, a)) for a in ("eps", "variance_epsilon", "epsilon") if hasattr(norm, a)), 1e-5)
    centre = _centres(norm)
    shifted = x - x.mean(dim=-1, keepdim=True) if centre else x
    sigma = (shifted.pow(2).mean(dim=-1, keepdim=True) + eps).sqrt()  # (T, 1), frozen
    n = shifted / sigma  # (T, d_model)
    bias = getattr(norm, "bias", None)
    b = bias.detach().double().cpu() if isinstance(bias, Tensor) else torch.zeros(x.shape[-1], dtype=torch.float64)
    weight = getattr(norm, "weight", None)
    stored = (
        [weight.detach().double().cpu(), 1.0 + weight.detach().double().cpu()] if isinstance(weight, Tensor) else []
    )
    stored.append(torch.ones(x.shape[-1], dtype=torch.float64))
    gain = min(stored, key=lambda g: float((n * g + b - y).abs().max()))  # (d_model,): the one the forward applied
    h, out = head_io["head_in"], head_io["head_out"]
    k = float((h * y).sum() / y.pow(2).sum())  # the LM head's input = k × the norm's output
    s = float((logits * out).sum() / out.pow(2).sum())  # the logits = s × the LM head's output
    if token_id is None:
        token_id = int(logits[-1].argmax())
    u = head.weight[token_id].detach().double().cpu() * k * s  # (d_model,)
    c = join_scale_of(model.config)
    direction = gain * u / sigma  # (T, d_model): v at position t adds (v − centre·mean v) · direction_t
    per_head, magnitude = [], []
    assert len(z_calls) == len(projections), (len(z_calls), len(projections))  # one call a layer
    for module, z in zip(projections, z_calls, strict=True):
        weight = module.weight.detach().double().cpu()
        head_dim = z.shape[-1] // n_head
        layer, size = [], []
        for index in range(n_head):
            part = slice(index * head_dim, (index + 1) * head_dim)
            w_o = weight[:, part].T if isinstance(module, nn.Linear) else weight[part, :]  # (head_dim, d_model)
            v = c * (z[:, part] @ w_o)  # (T, d_model): the head's part of the stream
            if centre:
                v = v - v.mean(dim=-1, keepdim=True)
            terms = v * direction
            layer.append(terms.sum(dim=-1))
            size.append(terms.abs().sum(dim=-1))
        per_head.append(torch.stack(layer, dim=-1))
        magnitude.append(torch.stack(size, dim=-1))
    return Reference(
        per_head=torch.stack(per_head, dim=1),
        magnitude=torch.stack(magnitude, dim=1),
        logits=logits[:, token_id],
        token_id=token_id,
    )

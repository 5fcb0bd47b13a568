"""Running a model from the middle: every decoder layer's output cached once per text, later passes from a layer on.

A head of layer L changes nothing before L, so a pass that ablates or patches only heads of layers ≥ L needs
nothing of layers < L but what they returned, which is the same in every such pass (TransformerLens'
``forward(start_at_layer=L)``). Through the model's own layer list (the ``nn.ModuleList`` that holds every
attention call of a pass, one child after the other), the ``resid.post`` hook point of
:func:`attnviz.models.hf.points.run` keeps what each layer returned on one text (:func:`cached_layers`); a later pass
of the same text with ``start_at_layer`` runs the model's whole forward, but each layer before the start returns
its cached output (widened to the pass's batch) instead of computing it. The embeddings, the masks and the rotary
tables are still computed: a fraction of one layer.

A model runs that way only when its layers can be (:func:`cached_layers` says why not): a list found, every layer
called once per pass in order, every attention call inside one of them, and a check pass from the middle layer
that gives the baseline's outputs within rounding (:func:`outputs_match`). Otherwise the caller runs the whole
forward, and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn


def layer_list(model: nn.Module, attention: Sequence[nn.Module]) -> nn.ModuleList | None:
    """The model's decoder-layer list: the ModuleList with the most children among those with an attention module
    of ``attention`` in their children's subtrees; None when no list holds one."""
    wanted = {id(module) for module in attention}
    best = None
    for module in model.modules():
        if not isinstance(module, nn.ModuleList) or not len(module):
            continue
        holds = any(id(inner) in wanted for child in module for inner in child.modules())
        if holds and (best is None or len(module) > len(best)):
            best = module
    return best


@dataclass(eq=False)
class CachedLayers:
    """What each layer of the list returned on one text (batch 1), and the attention calls made before each began.
    It holds tensors only, never the layers themselves (a cached entry must not keep an evicted model alive).

    outputs[i]: layer i's output; calls_before[i]: attention calls of the pass made before layer i started (the
    index, among a pass's attention layers, of layer i's first); nbytes: what the outputs hold.
    """

    outputs: list[object]
    calls_before: list[int]
    n_calls: int
    nbytes: int

    def start_for(self, attention_layer: int) -> int:
        """The list's layer whose run holds attention call ``attention_layer``: the last to start before it."""
        start = 0
        for index, before in enumerate(self.calls_before):
            if before <= attention_layer:
                start = index
        return start


def cached_layers(n: int, outputs: dict[int, object], order: list[int], before: dict[int, int], n_calls: int):
    """The cache of a pass that kept each of the list's ``n`` layers' outputs (the ``resid.post`` hook point, in
    ``order`` of their calls) and the attention layers before each began, or why the layers cannot be resumed (one
    line)."""
    if order != list(range(n)):
        return f"its {n} layers did not each run once, in order"
    if before[0] != 0:
        return "attention ran before its first layer"
    if any(not isinstance(outputs[i], Tensor | tuple) for i in range(n)):
        return "a layer returns something other than tensors"
    nbytes = 0
    for i in range(n):
        out = outputs[i]
        for tensor in out if isinstance(out, tuple) else (out,):
            if isinstance(tensor, Tensor):
                nbytes += tensor.numel() * tensor.element_size()
    return CachedLayers(
        outputs=[outputs[i] for i in range(n)],
        calls_before=[before[i] for i in range(n)],
        n_calls=n_calls,
        nbytes=nbytes,
    )


JOINS_PER_LAYER = 2  # what a layer adds to the residual stream, rounded in the model's dtype: attention's, MLP's
RESUME_SAFETY = 4.0  # what the random-walk estimate leaves out: a kernel blocking its sums otherwise rounds some twice


def _accumulation(dtype: torch.dtype, device: torch.device) -> tuple[float, int]:
    """(the rounding of one product-and-add inside a matmul, extra roundings in ``dtype`` per join) on ``device``.

    A CPU accumulates in float32 (float64 for float64). CUDA may round float32 inputs to TF32 (10 bits) where the
    user allows it, and adds a bfloat16 or float16 matmul's split-K partial sums in that dtype (torch's default):
    one more rounding in the dtype before each join."""
    if dtype == torch.float64:
        return torch.finfo(torch.float64).eps, 0
    eps32 = torch.finfo(torch.float32).eps
    if device.type != "cuda":
        return eps32, 0
    if dtype == torch.float32:
        return (2.0**-10 if torch.get_float32_matmul_precision() != "highest" else eps32), 0
    reduced = {
        torch.bfloat16: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        torch.float16: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
    }.get(dtype, False)
    return eps32, 1 if reduced else 0


def resume_bound(dtype: torch.dtype, device: torch.device | str, scale: float, layers: int, d_model: int) -> float:
    """How far a resumed pass's outputs may lie from the whole pass's by rounding alone: outputs of size ``scale``
    (their largest |value|) after ``layers`` layers of width ``d_model`` run at another batch shape, in ``dtype`` on
    ``device`` (STYLE §22: eps × |value| × √depth × safety).

    Another batch shape may pick another kernel, which rounds otherwise: what each layer adds to the residual stream
    (:data:`JOINS_PER_LAYER`), stored in the model's ``dtype``, by half an eps of its size (the roundings inside a
    sublayer reach the stream through its output projection, counted in its join), and each sum inside the matmuls
    by the accumulation's eps over its terms (d_model in attention, 4·d_model in the MLP, d_model more in the
    output's projection: depth ``layers`` × 5·d_model + d_model). Independent roundings add as a random walk:
    √((eps(dtype)/2)² × joins + eps_acc² × depth). A pass that resumed wrongly (a stale or misplaced layer's cache:
    another text's outputs) is off by the outputs' own size, beyond this for every dtype and depth in use."""
    device = torch.device(device)
    half = torch.finfo(dtype).eps / 2 if dtype.is_floating_point else 0.0
    accumulate, extra = _accumulation(dtype, device)
    layers = max(layers, 1)
    joins = (JOINS_PER_LAYER + extra) * layers + 1  # + 1: the output's own projection
    depth = layers * 5 * d_model + d_model
    return RESUME_SAFETY * max(1.0, abs(scale)) * (half**2 * joins + accumulate**2 * depth) ** 0.5


def outputs_match(before: Tensor, after: Tensor, *, layers: int = 1, d_model: int | None = None) -> bool:
    """Whether a resumed pass gave the whole pass's outputs: equal, or within :func:`resume_bound` of their scale,
    in their dtype on their device. ``layers``: the layers the resumed pass ran; ``d_model``: the model's width
    (default the outputs' own: a vocabulary, wider than d_model, bounds it from above)."""
    if before.shape != after.shape:
        return False
    if not before.numel():
        return True
    # reduced on their device, the three numbers brought to the host at once (one wait, not three)
    equal = (before == after).all().float()
    largest, scale = (before.float() - after.float()).abs().max(), before.abs().max().float()
    equal, largest, scale = torch.stack([equal, largest, scale]).cpu().tolist()
    if equal:
        return True
    width = d_model if d_model is not None else (before.shape[-1] if before.dim() else 1)
    return largest <= resume_bound(before.dtype, before.device, scale, layers, width)

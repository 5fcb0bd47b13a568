"""The embedded model's one hooked pass: every lab on it is hook functions handed to :func:`run_hooked`.

The same point names and hook signatures as a Hugging Face model's pass (:mod:`attnviz.models.hf.points`), served
from the model's own blocks, and the result of the same kind (:class:`~attnviz.models.hf.points.PassResult`):

==================  ==============================================================================================
``attn``            how every block attends: a :class:`~attnviz.core.capture.CaptureSession` (the capture), a
                    :class:`~attnviz.models.hf.attention.MaskOverride` (the Mask lab: every block under that mask)
                    or a :class:`~attnviz.models.hf.attention.ReferenceRun` (its masks recorded): both on the
                    inspectable path; absent: the fused path under the model's mask
``attn.qkv``        ``fn(layer, q, k, v)``: each block's q (B, n_head, T, hd), k and v (B, n_kv_head, T, hd)
``attn.z``          ``fn(layer, z) -> z``: each head's output (B, T, n_head, head_dim), what W_O reads
``attn.pattern``    ``fn(layer, weights)``: the full weights (B, n_head, T, T) of the inspectable path
``resid.pre``       ``fn(layer, x)``: the residual stream (B, T, d_model) entering each block
``resid.post``      ``fn(layer, x)``: what each block returned (B, T, d_model)
==================  ==============================================================================================

It has no final norm and no LM head (no ``norm.final``, ``unembed.in``, ``logits`` or ``read_out``) and nothing our
layers copy (no ``attn.in``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from attnviz.core.attention import fused_attention, scaled_dot_product_attention
from attnviz.core.capture import CaptureSession
from attnviz.core.masks import KeyRanges
from attnviz.models.hf.attention import MaskOverride, ReferenceRun
from attnviz.models.resume import CachedLayers
from attnviz.models.source import PassResult

HOOK_POINTS = frozenset({"attn", "attn.qkv", "attn.z", "attn.pattern", "resid.pre", "resid.post"})


def run_hooked(
    model,
    inputs: Tensor | Sequence[Sequence[str]],
    hooks: Mapping[str, object] | None = None,
    *,
    resume: CachedLayers | None = None,
    start_at_layer: int = 0,
    stop_at_layer: int | None = None,
    grad: bool = False,
    keys: Sequence[KeyRanges] | None = None,
) -> PassResult:
    """``model``'s (an :class:`~attnviz.models.embedded.model.EmbeddedModel`) one pass, with ``hooks``
    ({point: hook}) at its :data:`HOOK_POINTS`, as :func:`attnviz.models.hf.points.run` runs a Hugging Face model.

    ``inputs``: embeddings (B, T, d_model), or rows of token strings embedded at positions 0 … T-1. ``attn``:
    a :class:`CaptureSession` (the capture), a :class:`MaskOverride` (every layer under that mask, the
    inspectable path) or a :class:`ReferenceRun` (the inspectable path under the model's mask, each layer's
    masks recorded); absent: the fused path. The inspectable path is also taken for ``attn.pattern``.
    ``keys``: each row's mask (one for all rows), default the model's own. ``resume`` (the text's
    :meth:`layer_cache`) with ``start_at_layer``: the blocks before it skipped, its input the cached output of
    the one before, widened to the batch; ``stop_at_layer``: end after block ``stop_at_layer - 1`` (its output
    is the result's, and ``hidden`` None). With a graph when ``grad``. ValueError for a point it does not have.
    """
    hooks = dict(hooks or {})
    missing = set(hooks) - model.hook_points
    if missing:
        raise ValueError(f"this model has no hook point {sorted(missing)[0]!r}; it has {sorted(model.hook_points)}")
    stop = model.n_layer if stop_at_layer is None else stop_at_layer
    if not 0 <= start_at_layer < stop <= model.n_layer or (start_at_layer and resume is None):
        raise ValueError(
            f"a pass from layer {start_at_layer} (resume: {resume is not None}) to {stop} of {model.n_layer}"
        )
    mode, pattern = hooks.get("attn"), hooks.get("attn.pattern")
    if mode is not None and not isinstance(mode, CaptureSession | MaskOverride | ReferenceRun):
        raise ValueError(f"the attn point takes a CaptureSession, a MaskOverride or a ReferenceRun, not {mode!r}")
    if isinstance(mode, CaptureSession) and pattern is not None:
        raise ValueError("the capture keeps no full weights for attn.pattern")
    inspectable = isinstance(mode, MaskOverride | ReferenceRun) or pattern is not None
    read, edit = hooks.get("attn.qkv"), hooks.get("attn.z")
    batch, T = inputs.shape[:2] if isinstance(inputs, Tensor) else (len(inputs), len(inputs[0]) if inputs else 0)
    rows = list(keys) if keys is not None else [model._keys(T)]
    rows = rows * batch if len(rows) == 1 else rows  # one mask per sequence
    scale = 1.0 / math.sqrt(model.head_dim)
    dense: list[Tensor] = []  # the mask the fused or the inspectable path applies, built once on first use

    def mask() -> Tensor:
        if not dense:
            if isinstance(mode, MaskOverride):
                dense.append(mode.mask.to(model.device))  # (T, T)
            elif keys is None or len(keys) == 1:
                dense.append(rows[0].dense().to(model.device))  # (T, T)
            else:
                dense.append(torch.stack([r.dense() for r in rows])[:, None].to(model.device))  # (B, 1, T, T)
        return dense[0]

    def attend(q: Tensor, k: Tensor, v: Tensor, layer: int) -> Tensor:
        if read is not None:
            read(layer, q, k, v)
        if isinstance(mode, CaptureSession):
            out = mode.attend(q, k, v, rows, scale, module=model.blocks[layer].attn)  # (B, n_head, T, hd)
        elif inspectable:
            if isinstance(mode, ReferenceRun):
                mode.keys.append(rows)
            out, weights = scaled_dot_product_attention(q, k, v, mask())  # (B, n_head, T, hd), (B, n_head, T, S)
            if pattern is not None:
                pattern(layer, weights)
        else:
            out = fused_attention(q, k, v, mask(), scale)  # (B, n_head, T, hd)
        if edit is None:
            return out
        return edit(layer, out.transpose(1, 2)).transpose(1, 2)  # z (B, T, n_head, hd) before W_O, and back

    before, after = hooks.get("resid.pre"), hooks.get("resid.post")
    with torch.enable_grad() if grad else torch.no_grad():
        if start_at_layer:
            x = resume.outputs[start_at_layer - 1].expand(batch, -1, -1).contiguous()  # (B, T, d_model)
        elif isinstance(inputs, Tensor):
            x = inputs
        else:
            x = model.embed([list(row) for row in inputs], torch.arange(T)[None].repeat(batch, 1))  # (B, T, d)
        for layer in range(start_at_layer, stop):
            if before is not None:
                before(layer, x)
            x, _ = model.blocks[layer](x, attend=lambda q, k, v, layer=layer: attend(q, k, v, layer))
            if after is not None:
                after(layer, x)
    stopped = stop < model.n_layer
    starts = {layer: layer for layer in range(start_at_layer, stop)}  # one attention layer per block
    return PassResult(output=x, hidden=None if stopped else x, layers_run=stop, stopped=stopped, layer_starts=starts)

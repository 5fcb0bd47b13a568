"""Running a model from the middle: every decoder layer's output cached once per text, later passes from a layer on.

A head of layer L changes nothing before L, so a pass that ablates or patches only heads of layers ≥ L needs
nothing of layers < L but what they returned, which is the same in every such pass (TransformerLens'
``forward(start_at_layer=L)``). Through the model's own layer list (the ``nn.ModuleList`` that holds every
attention call of a pass, one child after the other), :func:`cache_layers` keeps what each layer returned on one
text; under :func:`resuming` a later pass of the same text runs the model's whole forward, but each layer before
the start returns its cached output (widened to the pass's batch) instead of computing it. The embeddings, the
masks and the rotary tables are still computed: a fraction of one layer.

A model runs that way only when its layers can be (:func:`cache_layers` says why not): a list found, every layer
called once per pass in order, every attention call inside one of them, and a check pass from the middle layer
that gives the baseline's outputs exactly. Otherwise the caller runs the whole forward, and says so.

Each layer's ``forward`` is wrapped once (the model is shared between sessions); the wrapper reads this thread's
context, so a pass in another thread is never skipped.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch
from torch import Tensor, nn

_skipped: ContextVar[dict[int, object] | None] = ContextVar("attnviz_skipped_layers", default=None)
_wrap_lock = threading.Lock()
WRAPPED = "_attnviz_resumable"


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


def _wrap(layer: nn.Module) -> None:
    """Give ``layer`` a forward that returns this thread's cached output when it is skipped (once per layer)."""
    with _wrap_lock:
        if getattr(layer, WRAPPED, False):
            return
        forward = layer.forward

        def skipping(*args, **kwargs):
            skipped = _skipped.get()
            if skipped is not None and id(layer) in skipped:
                return skipped[id(layer)]
            return forward(*args, **kwargs)

        layer.forward = skipping
        setattr(layer, WRAPPED, True)


def _widened(value: object, batch: int) -> object:
    """A layer's output for a batch of ``batch`` rows: every tensor with a batch of 1 repeated (tuples kept)."""
    if isinstance(value, Tensor):
        return value.expand(batch, *value.shape[1:]).contiguous() if value.dim() and value.shape[0] == 1 else value
    if isinstance(value, tuple):
        return type(value)(_widened(v, batch) for v in value) if not hasattr(value, "_fields") else value
    return value


@dataclass(eq=False)
class CachedLayers:
    """What each layer of the list returned on one text (batch 1), and the attention calls made before each began.

    layers: the list's modules, in order; outputs[i]: layer i's output; calls_before[i]: attention calls of the
    pass made before layer i started (the index, among a pass's attention layers, of layer i's first).
    """

    layers: list[nn.Module]
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


@contextmanager
def caching(layers: nn.ModuleList, count: callable) -> Iterator[dict]:
    """Record, for this thread's passes, each layer's output and ``count()`` as it starts: {"outputs", "before",
    "order"}."""
    owner = threading.get_ident()
    seen: dict = {"outputs": {}, "before": {}, "order": []}

    def pre(index: int):
        def hook(module, args):
            if threading.get_ident() == owner:
                seen["before"][index] = count()
                seen["order"].append(index)

        return hook

    def post(index: int):
        def hook(module, args, output):
            if threading.get_ident() == owner:
                seen["outputs"][index] = output

        return hook

    hooks = [layer.register_forward_pre_hook(pre(i)) for i, layer in enumerate(layers)]
    hooks += [layer.register_forward_hook(post(i)) for i, layer in enumerate(layers)]
    try:
        yield seen
    finally:
        for hook in hooks:
            hook.remove()


def cached_layers(layers: nn.ModuleList, seen: dict, n_calls: int) -> CachedLayers | str:
    """The cache a :func:`caching` pass recorded, or why the layers cannot be resumed (one line)."""
    n = len(layers)
    if seen["order"] != list(range(n)):
        return f"its {n} layers did not each run once, in order"
    if seen["before"][0] != 0:
        return "attention ran before its first layer"
    if any(not isinstance(seen["outputs"][i], Tensor | tuple) for i in range(n)):
        return "a layer returns something other than tensors"
    nbytes = 0
    for i in range(n):
        out = seen["outputs"][i]
        for tensor in out if isinstance(out, tuple) else (out,):
            if isinstance(tensor, Tensor):
                nbytes += tensor.numel() * tensor.element_size()
    for layer in layers:
        _wrap(layer)
    return CachedLayers(
        layers=list(layers),
        outputs=[seen["outputs"][i] for i in range(n)],
        calls_before=[seen["before"][i] for i in range(n)],
        n_calls=n_calls,
        nbytes=nbytes,
    )


@contextmanager
def resuming(cache: CachedLayers | None, start: int, batch: int) -> Iterator[int]:
    """Within this block, this thread's passes skip the layers before ``start``, each returning its cached output
    (the last of them widened to ``batch`` rows); yields the attention calls those layers made (where the pass's
    counting begins).
    A None cache or a start of 0 skips nothing."""
    if cache is None or start <= 0:
        yield 0
        return
    # only the last skipped layer's output enters the next layer: widened once; the earlier ones, never read on
    # by the layers that run, stay at one row (a model that reads them fails the check pass, run at two rows)
    skipped = {id(cache.layers[i]): cache.outputs[i] for i in range(start - 1)}
    skipped[id(cache.layers[start - 1])] = _widened(cache.outputs[start - 1], batch)
    token = _skipped.set(skipped)
    try:
        yield cache.calls_before[start]
    finally:
        _skipped.reset(token)


def outputs_match(before: Tensor, after: Tensor) -> bool:
    """Whether a resumed pass gave the whole pass's outputs: equal, or within float32's rounding of their scale."""
    if before.shape != after.shape:
        return False
    if torch.equal(before, after):
        return True
    scale = float(before.abs().max()) if before.numel() else 0.0
    return bool((before - after).abs().max() <= 1e-5 * max(1.0, scale))

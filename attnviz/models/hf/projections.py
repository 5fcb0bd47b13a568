"""Each attention layer's output projection W_O, found by data flow, and its per-head blocks W_O^h.

Module names say little (``o_proj``, ``dense``, ``out_proj``, ``c_proj``, or a
sibling module outside the attention, as BERT's ``SelfOutput.dense``), so the
projection is found by what it reads: :func:`find_output_projections` runs one
tiny probe pass (a few token ids) under the attnviz attention interface, keeps
the output of every attention call, and picks, for each call, the first
``nn.Linear`` or transformers ``Conv1D`` run after it whose input is exactly
that output reshaped to (B, T, n_head·head_dim). A layer whose attention output
is changed before the projection (DiffLlama's two halves, a gated attention,
a norm in between) has no such Linear, and the finder says so instead of
guessing: every value-weighted figure would otherwise be wrong.

The eager route never calls the interface (no output is seen), so
:func:`eager_output_projections` reads the structure instead: inside each
attention module, the last Linear/Conv1D called in its forward whose input
width is n_head·head_dim and whose output is d_model. A reading, not a proof;
its docstring says when it refuses.

API (stable; other parts import it):

- :class:`OutputProjection`: ``module`` (the Linear/Conv1D), ``attention`` (the
  attention module that feeds it), ``n_head``, ``head_dim``; ``blocks()`` gives
  W_O^h as (n_head, head_dim, d_model), float32, such that the projection of a
  head's slice ``z_h`` (head_dim,) is ``z_h @ blocks()[h]`` (its bias, added once
  to the sum over heads, is ``bias()``); ``head_slice(h)`` is the slice of the
  projection's input that belongs to head h.
- :class:`Projections`: ``layers`` (one OutputProjection per attention call of
  a pass, in order), ``for_attention(module)``, ``reason`` (None when every
  layer was found, else why not, in one line) and ``found``.
- :func:`find_output_projections(model, n_head, vocab_size=None)` -> Projections (interface route).
- :func:`eager_output_projections(model, n_head, d_model, vocab_size=None)` -> Projections (eager route).
- :func:`head_blocks(module, n_head)` -> (n_head, head_dim, d_model) for any Linear/Conv1D.

:class:`~attnviz.models.hf.source.HFSource` holds the result as ``output_projections`` (found once per loaded
model); the capture reads each layer's factors by the attention module that calls it
(``CaptureSession.attend(..., module=...)``, passed by :func:`attnviz.models.hf.attention.attention_forward`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from accelerate.utils import align_module_device
from torch import Tensor, nn

from attnviz.core.capture import CaptureSession
from attnviz.models.hf.placement import main_device

PROBE_TOKENS = 5  # the probe pass reads this many token ids: enough for every shape, next to nothing in time


def _conv1d_type() -> type | None:
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:  # pragma: no cover - transformers always has it
        return None
    return Conv1D


def probe_ids(model: nn.Module, vocab_size: int | None = None) -> Tensor:
    """A probe pass's input: :data:`PROBE_TOKENS` token ids spread over the vocabulary, (1, PROBE_TOKENS), on the
    device the model takes its inputs on."""
    vocab = vocab_size or getattr(getattr(model, "config", None), "vocab_size", None) or 100
    ids = (torch.arange(PROBE_TOKENS) * 7 + 3) % max(1, int(vocab))
    return ids[None].to(main_device(model, "cpu"))  # not a parameter's: an offloaded one is on the meta device


def is_projection(module: nn.Module) -> bool:
    """Whether ``module`` is a dense map a projection can be: ``nn.Linear`` or transformers' ``Conv1D`` (GPT-2)."""
    conv = _conv1d_type()
    return isinstance(module, nn.Linear) or (conv is not None and isinstance(module, conv))


def _in_out(module: nn.Module) -> tuple[int, int]:
    """(input width, output width) of a Linear (weight (out, in)) or a Conv1D (weight (in, out))."""
    weight = module.weight
    return (weight.shape[1], weight.shape[0]) if isinstance(module, nn.Linear) else (weight.shape[0], weight.shape[1])


def head_blocks(module: nn.Module, n_head: int) -> Tensor:
    """W_O^h of a Linear or Conv1D whose input is n_head slices side by side: (n_head, head_dim, d_model) float32.

    ``x @ W`` of the whole projection (bias aside) equals Σ_h x_h @ blocks[h], x_h = x[..., h·hd:(h+1)·hd].
    """
    n_in, n_out = _in_out(module)
    if n_in % n_head:
        raise ValueError(f"a projection with {n_in} inputs cannot be split into {n_head} heads")
    with align_module_device(module):  # a layer offloaded to disk keeps its weights on the meta device until then
        weight = module.weight.detach().float()
    by_input = weight.T if isinstance(module, nn.Linear) else weight  # (n_in, d_model)
    return by_input.reshape(n_head, n_in // n_head, n_out)  # (n_head, head_dim, d_model)


@dataclass(frozen=True, eq=False)
class OutputProjection:
    """One attention layer's output projection: a Linear/Conv1D reading n_head slices of head_dim."""

    module: nn.Module
    attention: nn.Module | None
    n_head: int
    head_dim: int

    @property
    def d_model(self) -> int:
        return _in_out(self.module)[1]

    def blocks(self) -> Tensor:
        """W_O^h: (n_head, head_dim, d_model), float32, on the projection's device."""
        return head_blocks(self.module, self.n_head)

    def bias(self) -> Tensor | None:
        """The projection's bias (d_model,), added once after the heads are summed; None without one."""
        with align_module_device(self.module):  # an offloaded projection keeps its bias on disk outside a pass
            bias = getattr(self.module, "bias", None)
            return None if bias is None else bias.detach().float().clone()

    def head_slice(self, head: int) -> slice:
        """Where head ``head`` sits in the projection's input (the last dimension)."""
        return slice(head * self.head_dim, (head + 1) * self.head_dim)


@dataclass(frozen=True, eq=False)
class Projections:
    """Every attention layer's output projection, in the order a pass calls the layers, or why not.

    ``layers`` is empty and ``reason`` says why when any layer's projection was not found.
    """

    layers: tuple[OutputProjection, ...] = ()
    reason: str | None = None
    _by_attention: dict = field(default_factory=dict, repr=False)

    @property
    def found(self) -> bool:
        return self.reason is None and bool(self.layers)

    def for_attention(self, module: nn.Module) -> OutputProjection | None:
        """The projection fed by attention module ``module`` (None when it has none found)."""
        return self._by_attention.get(module)


def _refused(reason: str) -> Projections:
    return Projections(layers=(), reason=reason)


class _ProbeSession(CaptureSession):
    """A capture session that also keeps each attention call's module and output, in order."""

    def __init__(self, events: list, q_len: int, n_heads_total: int) -> None:
        super().__init__(1, q_len, n_heads_total, keep_qk=False)
        self.events = events

    def attend(self, q: Tensor, k: Tensor, v: Tensor, keys, scale, softcap=None, sinks=None, **kwargs) -> Tensor:
        out = super().attend(q, k, v, keys, scale, softcap, sinks, **kwargs)  # (B, n_head, T, hd)
        module = kwargs.get("module")
        flat = out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)  # (B, T, n_head·hd)
        self.events.append(("attention", module, flat.detach().clone(), out.shape[1]))
        return out


def _same(x: Tensor, flat: Tensor) -> bool:
    """Whether a Linear's input is exactly the attention output (any leading shape with the same cells)."""
    if not isinstance(x, Tensor) or x.numel() != flat.numel() or x.shape[-1] != flat.shape[-1]:
        return False
    return bool(torch.equal(x.detach().reshape(flat.shape).to(flat.dtype), flat))


@torch.no_grad()
def find_output_projections(model: nn.Module, n_head: int, vocab_size: int | None = None) -> Projections:
    """The output projection of every attention layer of a model loaded with ``attn_implementation="attnviz"``.

    One probe pass of :data:`PROBE_TOKENS` ids, with a pre-hook on every
    Linear/Conv1D (this context's calls only: the model may be shared). Each
    attention call is matched to the first projection called after it whose
    input equals the call's output reshaped to (B, T, n_head·head_dim). Any call
    without a match, or an attention module matched to two different
    projections, refuses the whole model (``reason``).
    """
    from attnviz.models.hf.attention import capturing
    from attnviz.models.hf.points import attached

    events: list = []

    def hook(module, args):
        if args:
            events.append(("linear", module, args[0], None))

    ids = probe_ids(model, vocab_size)
    n_layer = int(getattr(getattr(model, "config", None), "num_hidden_layers", 1) or 1)
    session = _ProbeSession(events, PROBE_TOKENS, n_layer * n_head)
    try:
        with attached([m for m in model.modules() if is_projection(m)], hook), capturing(session):
            model(input_ids=ids, return_dict=True)
    except Exception as err:  # the probe is best effort: its failure is said, and the model still runs without it
        return _refused(f"the probe pass failed: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
    layers: list[OutputProjection] = []
    by_attention: dict = {}
    for i, (kind, attention, flat, heads) in enumerate(events):
        if kind != "attention":
            continue
        match = next((e[1] for e in events[i + 1 :] if e[0] == "linear" and _same(e[2], flat)), None)
        name = type(attention).__name__ if attention is not None else "attention"
        if match is None:
            return _refused(f"{name}'s output is changed before any projection reads it (call {len(layers)})")
        projection = OutputProjection(match, attention, heads, flat.shape[-1] // heads)
        earlier = by_attention.get(attention)
        if earlier is not None and earlier.module is not match:
            return _refused(f"{name} feeds two different projections")
        if attention is not None:
            by_attention[attention] = projection
        layers.append(projection)
    if not layers:
        return _refused("the probe pass called no attention layer through the interface")
    return Projections(layers=tuple(layers), _by_attention=by_attention)


@torch.no_grad()
def eager_output_projections(model: nn.Module, n_head: int, d_model: int, vocab_size: int | None = None) -> Projections:
    """The eager route's output projections, read from structure (no attention output is seen there).

    For each attention module (class name ending in "Attention", outermost
    only), the last Linear/Conv1D inside it, in registration order, that maps
    n_head·head_dim inputs to ``d_model`` outputs and is not a fused q/k/v
    projection (its output is d_model wide, not 3·d_model). A module without
    one (DeBERTa-v2's projection lives in a sibling ``SelfOutput``): that
    sibling's ``dense`` when the parent has one of the right shape. Otherwise refused.

    The layers are the attention modules a probe pass calls, in the order it calls them, one a call (as the
    interface route numbers them): a module a text-only pass never runs (TrOCR's cross-attention) is not a
    layer, and a module shared by every layer is each of them. Where the probe fails, the structure's order.
    """
    outer = [m for m in model.modules() if type(m).__name__.endswith("Attention")]
    inner_ids = {id(c) for m in outer for c in m.modules() if c is not m and type(c).__name__.endswith("Attention")}
    outer = [m for m in outer if id(m) not in inner_ids]
    parents = {id(child): parent for parent in model.modules() for child in parent.children()}
    layers: list[OutputProjection] = []
    by_attention: dict = {}
    for attention in outer:
        candidates = [m for m in attention.modules() if is_projection(m) and _in_out(m)[1] == d_model]
        candidates = [m for m in candidates if _in_out(m)[0] % n_head == 0]
        if not candidates:
            parent = parents.get(id(attention))
            siblings = [] if parent is None else [c for c in parent.modules() if c not in set(attention.modules())]
            candidates = [
                m for m in siblings if is_projection(m) and _in_out(m) == (_in_width(attention, n_head), d_model)
            ]
        if not candidates:
            return _refused(f"{type(attention).__name__} has no Linear of n_head·head_dim -> {d_model}")
        module = candidates[-1]
        projection = OutputProjection(module, attention, n_head, _in_out(module)[0] // n_head)
        by_attention[attention] = projection
        layers.append(projection)
    if not layers:
        return _refused("no attention module found")
    called = _attention_calls(model, list(by_attention), vocab_size)
    if called:
        layers = [by_attention[module] for module in called]
    return Projections(layers=tuple(layers), _by_attention=by_attention)


@torch.no_grad()
def _attention_calls(model: nn.Module, modules: list[nn.Module], vocab_size: int | None) -> list[nn.Module]:
    """``modules`` as one probe pass of :data:`PROBE_TOKENS` ids calls them, in order, one entry a call (this
    context's calls only: the model may be shared); [] where the pass fails."""
    from attnviz.models.hf.points import attached

    calls: list[nn.Module] = []

    def hook(module, args, kwargs):
        calls.append(module)

    try:
        with attached(modules, hook, with_kwargs=True):
            model(input_ids=probe_ids(model, vocab_size), return_dict=True)
    except Exception:  # the probe is best effort: the structure's order stands
        return []
    return calls


def _in_width(attention: nn.Module, n_head: int) -> int:
    """n_head·head_dim of an attention module, from its attributes (head_dim, attention_head_size), else -1."""
    for name in ("head_dim", "attention_head_size", "head_size"):
        value = getattr(attention, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return n_head * value
    return -1


__all__ = [
    "PROBE_TOKENS",
    "OutputProjection",
    "Projections",
    "eager_output_projections",
    "find_output_projections",
    "head_blocks",
    "is_projection",
    "probe_ids",
]

"""A loaded model's hook points, found once, and its one hooked pass.

TransformerLens' idea (hook points, ``run_with_hooks(..., start_at_layer=)``) on a transformers model as it is: a
source hands :func:`run` the model's forward arguments and a dict of hook functions by point name, and every lab
(the capture, the mask override, the reference, ablation, patching, attribution, direct logits, resuming, the KV
prefill into our layers, parity's inputs) is hook functions handed to that call. The points:

========================  ===========================================================================================
``attn``                  what the attention function of every layer does in the pass (interface route): a
                          :class:`~attnviz.core.capture.CaptureSession`, a mask override or the model's own eager
                          attention (:mod:`attnviz.models.hf.attention`); absent: torch's fused kernel
``attn.qkv``              ``fn(layer, q, k, v)``: each attention layer's q, k (after RoPE) and v, read (interface)
``attn.in``               ``fn(layer, hidden)``: what enters each attention module our layers copy (parity)
``attn.z``                ``fn(layer, z) -> z``: each head's output (B, T, n_head, head_dim), what the output
                          projection W_O reads: read, replaced or differentiated. At W_O's input where every W_O was
                          found; else (interface route) at the attention function's output
``resid.pre``             ``fn(layer, hidden)``: the residual stream entering each layer of the model's layer list
``resid.post``            ``fn(layer, output)``: what each layer of the model's layer list returned
``unembed.in``            ``fn(x) -> x``: what the LM head reads (B, T, d)
``norm.final``            ``fn(residual, normed)``: what enters and leaves the final norm (B, T, d) (direct logit
                          attribution), on the map :attr:`HFSource.read_outs` returns, where the norm was found
``logits``                ``fn(logits)``: the model's next-token logits (B, T, vocab), read from the pass's output
``read_out``              the modules that turn the last residual stream into logits, read once per model by a
                          probe pass (:func:`attnviz.models.hf.read_outs.reading_out`)
========================  ===========================================================================================

The modules behind each point are found once per loaded model (:class:`HookMap`) and each carries one permanent
hook that does nothing outside a pass; a pass is a :class:`Pass` in a ``ContextVar``, so a model shared between
sessions only ever runs the hooks of the pass in the calling context. ``start_at_layer`` (with a
:class:`~attnviz.models.resume.CachedLayers` of the text) skips the layers before it, each returning its cached
output; ``stop_at_layer`` ends the pass after the layer before it, returning what that layer returned.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from torch import Tensor, nn

from attnviz.errors import ModelUnavailableError
from attnviz.i18n.message import msg
from attnviz.models.source import Capability, PassResult

HeadEdit = Callable[[int, Tensor], Tensor]  # (attention layer, z (B, T, n_head, head_dim)) -> the z W_O reads

_current: ContextVar[Pass | None] = ContextVar("attnviz_pass", default=None)
_owners: ContextVar[tuple[object, ...]] = ContextVar("attnviz_hook_owners", default=())
_install_lock = threading.Lock()
INSTALLED = "_attnviz_points"  # a module's attribute: the points its permanent hooks serve
HANDLES = "_attnviz_hook_handles"  # a module's attribute: the handles of those hooks
SKIPS = "_attnviz_skips"  # a layer's attribute: its forward is wrapped by _wrap_skipping
ORIGINAL_FORWARD = "_attnviz_forward"  # the instance forward a wrapped layer had before, None for its class's


@contextmanager
def owned() -> Iterator[Callable[[], bool]]:
    """For hooks attached for one block: ``mine()`` is True only in this context while the block runs (a model is
    shared between sessions, and a hook on it sees every session's passes). Blocks nest."""
    token = object()
    reset = _owners.set((*_owners.get(), token))
    try:
        yield lambda: token in _owners.get()
    finally:
        _owners.reset(reset)


@contextmanager
def attached(
    modules: Sequence[nn.Module], hook: Callable, *, pre: bool = True, with_kwargs: bool = False
) -> Iterator[None]:
    """``hook`` on each of ``modules`` for this block only, acting only on this context's passes (:func:`owned`):
    a probe's hooks, attached once at load (the output projections' search), not a pass's."""
    with owned() as mine:

        def guarded(*args):
            return hook(*args) if mine() else None

        if pre:
            handles = [m.register_forward_pre_hook(guarded, with_kwargs=with_kwargs) for m in modules]
        else:
            handles = [m.register_forward_hook(guarded) for m in modules]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()


def current() -> Pass | None:
    """The pass running in this context, or None."""
    return _current.get()


class _Stopped(Exception):  # noqa: N818 - control flow, never seen outside run()
    def __init__(self, output: object) -> None:
        self.output = output


@dataclass(frozen=True, eq=False)
class HookMap:
    """The modules behind a model's hook points, found once at load.

    projections: (module, n_head, head_dim) of each attention layer's output projection, in call order (empty:
    not found; "attn.z" is then served at the attention function's output); layers: the model's layer list
    (``resid.post`` and resuming) or None; attention_in: the attention modules our layers copy (``attn.in``);
    lm_head: the LM head (``unembed.in``) or None; base: the module whose output is the last hidden states;
    final_norm: the module whose output the LM head reads (``norm.final``), found by the read-outs' probe pass
    (:mod:`attnviz.models.hf.read_outs`), or None.
    """

    model: nn.Module
    interface: bool  # the layers call attnviz's attention function (attn, attn.qkv), not the model's own eager one
    projections: tuple[tuple[nn.Module, int, int], ...] = ()
    layers: tuple[nn.Module, ...] | None = None
    attention_in: tuple[nn.Module, ...] = ()
    lm_head: nn.Module | None = None
    base: nn.Module | None = None
    logits: bool = False  # the model's output holds next-token logits (an LM head ran): the ``logits`` point
    final_norm: nn.Module | None = None
    _z_index: dict = field(default_factory=dict, repr=False, init=False)  # id(module) -> its layers, in call order
    _layer_index: dict = field(default_factory=dict, repr=False, init=False)
    _in_index: dict = field(default_factory=dict, repr=False, init=False)

    def __post_init__(self) -> None:
        for index, (module, _, _) in enumerate(self.projections):
            self._z_index.setdefault(id(module), []).append(index)
        self._layer_index.update({id(layer): i for i, layer in enumerate(self.layers or ())})
        self._in_index.update({id(module): i for i, module in enumerate(self.attention_in)})
        for module, _, _ in self.projections:
            _install(module, "attn.z", _at_projection, pre=True)
        for layer in self.layers or ():
            _install(layer, "resid.pre", _at_layer_start, pre=True)
            _install(layer, "resid.post", _at_layer_end, pre=False)
            _wrap_skipping(layer)
        for module in self.attention_in:
            _install(module, "attn.in", _at_attention_input, pre=True, with_kwargs=True)
        if self.lm_head is not None:
            _install(self.lm_head, "unembed.in", _at_head_input, pre=True)
        if self.final_norm is not None:
            _install(self.final_norm, "norm.final", _at_final_norm, pre=False)
        base = self.base if self.base is not None else self.model
        _install(base, "hidden", _at_base, pre=False)
        for child in base.children():
            _install(child, "hidden.inner", _at_base_child, pre=False)

    @property
    def points(self) -> frozenset[str]:
        """The points this model has: what a source can do is which of these it offers."""
        found = {"read_out"}
        found |= {"attn", "attn.qkv"} if self.interface else set()
        found |= {"attn.z"} if self.interface or self.projections else set()
        found |= {"resid.pre", "resid.post"} if self.layers else set()
        found |= {"attn.in"} if self.attention_in else set()
        found |= {"unembed.in"} if self.lm_head is not None else set()
        found |= {"logits"} if self.logits else set()
        found |= {"norm.final"} if self.final_norm is not None else set()
        return frozenset(found)

    def capabilities(self, causal: bool) -> frozenset[Capability]:
        """What a source of these points can do, read from them (and from whether its stack is causal: its KV
        cache), never decided beside them: q and k seen (``attn.qkv``): kept in records, any mask taken (``attn``);
        each W_O found (``attn.z`` at the projections): value norms where q, k, v are seen, heads edited
        (patching, the estimate, direct logits); ``attn.z`` anywhere: ablation; ``attn.in``: our layers reproduce
        its layers; ``logits``: it generates."""
        points = self.points
        found = {Capability.KEEP_QK, Capability.MASK} if "attn.qkv" in points else set()
        found |= {Capability.VALUE_NORMS} if "attn.qkv" in points and self.projections else set()
        found |= {Capability.GENERATE} if "logits" in points else set()
        found |= {Capability.REPRODUCE} if "attn.in" in points else set()
        found |= {Capability.ABLATE} if "attn.z" in points else set()
        found |= {Capability.KV_CACHE} if causal else set()
        found |= {Capability.EDIT_HEADS} if self.projections else set()
        return frozenset(found)

    def z_layer(self, module: nn.Module, calls: int, first_call: int) -> int:
        """The attention layer of a call of ``module``: its own where it serves one layer, else the pass's count of
        projection calls from ``first_call`` (a module run for every layer: ALBERT's)."""
        layers = self._z_index[id(module)]
        return layers[0] if len(layers) == 1 else first_call + calls

    def shape(self, module: nn.Module) -> tuple[int, int]:
        layer = self._z_index[id(module)][0]
        return self.projections[layer][1], self.projections[layer][2]


def _install(module: nn.Module, point: str, hook: Callable, *, pre: bool, with_kwargs: bool = False) -> None:
    """One permanent hook on ``module`` for ``point`` (once per module, whatever the number of maps)."""
    with _install_lock:
        served = getattr(module, INSTALLED, None)
        if served is None:
            served = set()
            object.__setattr__(module, INSTALLED, served)  # a plain attribute, not a submodule or a parameter
        if point in served:
            return
        served.add(point)
        if pre:
            handle = module.register_forward_pre_hook(hook, with_kwargs=with_kwargs)
        else:
            handle = module.register_forward_hook(hook)
        _handles(module).append(handle)


def _handles(module: nn.Module) -> list:
    """The handles of the hooks attnviz put on ``module`` (what :func:`uninstall` removes)."""
    handles = module.__dict__.get(HANDLES)
    if handles is None:
        handles = []
        object.__setattr__(module, HANDLES, handles)
    return handles


def uninstall(model: nn.Module) -> int:
    """Take every permanent hook and skipping forward that hook maps put on ``model``'s modules off it again,
    leaving each module as it was before (a model lent from a notebook goes back as the user had it); how many
    modules were touched. A loaded model keeps its hooks for its whole life and never calls this."""
    touched = 0
    with _install_lock:
        for module in model.modules():
            state = module.__dict__
            if HANDLES not in state and INSTALLED not in state and SKIPS not in state:
                continue
            touched += 1
            for handle in state.pop(HANDLES, ()):
                handle.remove()
            state.pop(INSTALLED, None)
            if state.pop(SKIPS, False):
                original = state.pop(ORIGINAL_FORWARD)
                if original is None:
                    state.pop("forward", None)  # the class's own forward again
                else:
                    module.forward = original  # an instance forward it had before (accelerate's device-map hook)
    return touched


def _wrap_skipping(layer: nn.Module) -> None:
    """Give ``layer`` a forward that returns the pass's cached output when the pass skips it (once per layer)."""
    with _install_lock:
        if getattr(layer, SKIPS, False):
            return
        forward = layer.forward
        object.__setattr__(layer, ORIGINAL_FORWARD, layer.__dict__.get("forward"))  # None: the class's own

        def skipping(*args, **kwargs):
            run = _current.get()
            if run is not None and run.skipped and run.map is not None:
                index = run.map._layer_index.get(id(layer))
                if index in run.skipped:
                    return run.skipped[index]
            return forward(*args, **kwargs)

        layer.forward = skipping
        object.__setattr__(layer, SKIPS, True)


@dataclass(eq=False)
class Pass:
    """One pass's hooks and what it has seen so far (in a ContextVar while :func:`run` runs it)."""

    map: HookMap | None  # None: a bare pass, only its attention mode (a probe at load)
    hooks: Mapping[str, object]
    first_call: int = 0  # attention layers the skipped layers held: where this pass's numbering begins
    skipped: dict[int, object] | None = None  # layer -> its cached output, for the layers the pass skips
    stop_at: int | None = None
    z_calls: int = 0  # output-projection calls so far
    attention_calls: int = 0  # attention-function calls so far (the same q twice is one layer: DiffLlama)
    last_attention: tuple[object, object] | None = None
    layer_starts: dict[int, int] = field(default_factory=dict)  # layer -> attention calls before it started
    hidden: list[Tensor] = field(default_factory=list)
    inner: list[Tensor] = field(default_factory=list)
    seen_masks: dict = field(default_factory=dict)  # every layer of a kind gets one mask tensor: read each once

    @property
    def layers_run(self) -> int:
        """The attention layers this pass numbered, the skipped ones included."""
        return self.first_call + max(self.z_calls, self.attention_calls)

    def attention_layer(self, module: object, query: Tensor) -> int:
        """The attention layer of a call of the attention function: a new one unless it repeats the last call
        (the same module on the same q: DiffLlama calls attention twice per layer)."""
        if self.last_attention is not None and self.last_attention[0] is module and self.last_attention[1] is query:
            return self.first_call + self.attention_calls - 1
        self.last_attention = (module, query)
        self.attention_calls += 1
        return self.first_call + self.attention_calls - 1


def _at_projection(module, args):
    run = _current.get()
    if run is None or not args or run.map is None or id(module) not in run.map._z_index:
        return None  # no pass, or a projection of another map's (a seq2seq kind's)
    layer = run.map.z_layer(module, run.z_calls, run.first_call)
    run.z_calls += 1
    edit = run.hooks.get("attn.z")
    if edit is None:
        return None
    x = args[0]  # (B, T, n_head * head_dim)
    n_head, head_dim = run.map.shape(module)
    z = x.reshape(*x.shape[:-1], n_head, head_dim)  # (B, T, n_head, head_dim)
    return (edit(layer, z).reshape(x.shape), *args[1:])


def at_attention(module: object, query: Tensor, key: Tensor, value: Tensor, output: Tensor | None) -> Tensor | None:
    """Called by attnviz's attention function for each call in a pass, with its output (B, T, n_head, hd) once
    computed (None: before): the ``attn.qkv`` reader, and ``attn.z`` where it is served at the attention output;
    returns the output W_O is to read."""
    run = _current.get()
    if run is None:
        return output
    if output is None:
        layer = run.attention_layer(module, query)
        reader = run.hooks.get("attn.qkv")
        if reader is not None:
            reader(layer, query, key, value)
        return None
    edit = run.hooks.get("attn.z")
    if edit is None or (run.map is not None and run.map.projections):
        return output
    return edit(run.first_call + run.attention_calls - 1, output)


def _at_layer_start(module, args):
    run = _current.get()
    if run is None or run.map is None or id(module) not in run.map._layer_index:
        return
    index = run.map._layer_index[id(module)]
    run.layer_starts[index] = run.layers_run
    reader = run.hooks.get("resid.pre")
    if reader is not None and args:
        reader(index, args[0])


def _at_layer_end(module, args, output):
    run = _current.get()
    if run is None or run.map is None or id(module) not in run.map._layer_index:
        return
    index = run.map._layer_index[id(module)]
    reader = run.hooks.get("resid.post")
    if reader is not None:
        reader(index, output)
    if run.stop_at is not None and index == run.stop_at - 1:
        raise _Stopped(output)


def _at_attention_input(module, args, kwargs):
    run = _current.get()
    reader = None if run is None else run.hooks.get("attn.in")
    if reader is not None and run.map is not None and id(module) in run.map._in_index:
        reader(run.map._in_index[id(module)], args[0] if args else kwargs["hidden_states"])


def _at_head_input(module, args):
    run = _current.get()
    edit = None if run is None else run.hooks.get("unembed.in")
    if edit is None or not args or not isinstance(args[0], Tensor):
        return None
    x = edit(args[0])
    return None if x is args[0] else (x, *args[1:])


def _at_final_norm(module, args, output):
    run = _current.get()
    reader = None if run is None else run.hooks.get("norm.final")
    if reader is not None and run.map is not None and run.map.final_norm is module and args:
        reader(args[0], output)


def _at_base(module, args, output):
    run = _current.get()
    hidden = output[0] if isinstance(output, tuple) else getattr(output, "last_hidden_state", None)
    if run is not None and isinstance(hidden, Tensor):  # not when the base is the LM itself
        run.hidden.append(hidden)


def _at_base_child(module, args, output):
    run = _current.get()
    hidden = getattr(output, "last_hidden_state", None)
    if run is not None and isinstance(hidden, Tensor):
        run.inner.append(hidden)


def widened(value: object, batch: int) -> object:
    """A layer's output for a batch of ``batch`` rows: every tensor with a batch of 1 repeated (tuples kept)."""
    if isinstance(value, Tensor):
        return value.expand(batch, *value.shape[1:]).contiguous() if value.dim() and value.shape[0] == 1 else value
    if isinstance(value, tuple):
        return type(value)(widened(v, batch) for v in value) if not hasattr(value, "_fields") else value
    return value


def run(
    hook_map: HookMap,
    call: Callable[[], object],
    hooks: Mapping[str, object] | None = None,
    *,
    resume=None,
    start_at_layer: int = 0,
    stop_at_layer: int | None = None,
    batch: int = 1,
) -> PassResult:
    """Run ``call`` (the model's forward on its arguments) once, as one pass with ``hooks`` ({point: hook}).

    ``resume``: a :class:`~attnviz.models.resume.CachedLayers` of the same text; the layers before
    ``start_at_layer`` of the layer list then return their cached output (the last one widened to ``batch`` rows)
    instead of running, and the pass numbers its attention layers from the first one not skipped.
    ``stop_at_layer``: end the pass once layer ``stop_at_layer - 1`` has returned. ValueError for a point this
    model does not have.
    """
    hooks = dict(hooks or {})
    missing = set(hooks) - hook_map.points
    if missing:
        raise ValueError(f"this model has no hook point {sorted(missing)[0]!r}; it has {sorted(hook_map.points)}")
    if (stop_at_layer is not None or start_at_layer) and not hook_map.layers:
        raise ValueError("this model's passes cannot start or stop mid-model: no layer list was found")
    state = Pass(hook_map, hooks, stop_at=stop_at_layer)
    if resume is not None and start_at_layer > 0:
        # only the last skipped layer's output enters the next layer: widened once; the earlier ones, never read
        # on by the layers that run, stay at one row (a model that reads them fails the check pass, at two rows)
        skipped = {i: resume.outputs[i] for i in range(start_at_layer - 1)}
        skipped[start_at_layer - 1] = widened(resume.outputs[start_at_layer - 1], batch)
        state.skipped, state.first_call = skipped, resume.calls_before[start_at_layer]
    token = _current.set(state)
    try:
        with ExitStack() as scoped:
            for name, hook in hooks.items():  # a hook that watches the whole pass (read_out) is entered around it
                if hasattr(hook, "__enter__"):
                    state.hooks[name] = scoped.enter_context(hook)
            try:
                output, stopped = call(), False
            except _Stopped as stop:
                output, stopped = stop.output, True
    finally:
        _current.reset(token)
    reader = state.hooks.get("logits")
    if reader is not None and not stopped:
        reader(output.logits)
    hidden = state.hidden[-1] if state.hidden else (state.inner[-1] if state.inner else None)
    read = state.hooks.get("read_out")
    return PassResult(output, hidden, state.layers_run, stopped, state.layer_starts, read)


@contextmanager
def attending(mode: object) -> Iterator[None]:
    """A bare pass for this block: this context's forward passes attend in ``mode`` (a capture session, a
    reference run) and serve no other point: a probe at load, before the hook points are found."""
    token = _current.set(Pass(None, {"attn": mode}))
    try:
        yield
    finally:
        _current.reset(token)


def last_hidden(result: PassResult, name: str) -> Tensor:
    """The pass's last hidden states (B, T, d_model); ModelUnavailableError (naming the model) where none was seen."""
    if result.hidden is None:
        raise ModelUnavailableError(msg("model_errors.no_hidden", name=name))
    return result.hidden

"""Each attention layer's heads read, replaced or differentiated where the output projection reads them.

The input of a layer's output projection W_O is its heads' outputs side by side, (B, T, n_head · head_dim)
(TransformerLens' ``hook_z``): a forward pre-hook on each projection found (:mod:`attnviz.models.hf.projections`)
hands it to an edit as (B, T, n_head, head_dim) and gives the projection what the edit returns. The same hook
serves both routes, the interface's and the eager one, and the layers are numbered by projection, so a pass that
skips its first layers (:mod:`attnviz.models.resume`) numbers the rest as a whole pass does.

For direct logit attribution, :func:`reading_out` finds what turns the last residual stream into logits: the
LM head (the model's output embeddings) and the module whose output it reads (the final norm), with what entered
and left that module; and, by data flow, how each layer's attention output joins the residual stream (the first
module after the projection reads x = r + c·o, r an earlier module's input: c is 1 in most models, Granite's
``residual_multiplier`` or MiniCPM's depth scale in others, applied without a module) and how the model's logits
relate to its LM head's output (Granite divides them by ``logits_scaling``). Each of these readings carries its
verdict (:class:`~attnviz.models.readings.Reading`): found, not applicable (a parallel block's MLP reads the layer's
input, not the stream after the attention; logits that are the LM head's own output) or not determined, never a
silent 1.0.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from accelerate.utils import align_module_device
from torch import Tensor, nn

from attnviz.models.hf.projections import OutputProjection
from attnviz.models.readings import NOT_APPLICABLE, Reading

RECENT = 8  # leaf modules remembered before the LM head runs: the final norm is among the last
CANDIDATES = 32  # leaf inputs remembered as a projection's residual r (a layer's input is a few modules back)
HeadEdit = Callable[[int, Tensor], Tensor]  # (attention layer, z (B, T, n_head, head_dim)) -> the z W_O reads


@contextmanager
def editing(projections: Sequence[OutputProjection], edit: HeadEdit, first_call: int = 0) -> Iterator[list[int]]:
    """Within this block, this thread's passes give the projection of attention layer i ``edit(i, z)`` instead of
    z; yields the layers called, in order.

    The layers are numbered by call, as the projections were found (one a call of a pass, in order), from
    ``first_call`` (a pass resumed mid-model skips the first calls): a module that serves several layers (ALBERT's
    one layer, run 12 times) gets one hook, and each of its calls its own number."""
    owner = threading.get_ident()
    called: list[int] = []
    shapes = {id(p.module): (p.n_head, p.head_dim) for p in projections}

    def hook(module, args):
        if threading.get_ident() != owner or not args:
            return None
        x = args[0]  # (B, T, n_head * head_dim)
        index = first_call + len(called)
        called.append(index)
        n_head, head_dim = shapes[id(module)]
        z = x.reshape(*x.shape[:-1], n_head, head_dim)  # (B, T, n_head, head_dim)
        return (edit(index, z).reshape(x.shape), *args[1:])

    modules = list({id(p.module): p.module for p in projections}.values())  # each module once, in order
    hooks = [module.register_forward_pre_hook(hook) for module in modules]
    try:
        yield called
    finally:
        for handle in hooks:
            handle.remove()


@dataclass(frozen=True, eq=False)
class ReadOut:
    """What turned one pass's last residual stream into logits (batch row 0, float32 on the CPU).

    residual: (T, d_model), what entered the final norm; normed: (T, d_model), what left it (the LM head's input);
    norm: the final norm's class name; norm_weight, norm_bias: (d_model,) or None; norm_eps; unembedding: (vocab, d_model),
    the LM head's weight; unembedding_bias: (vocab,) or None; logits: (T, vocab), the model's own.
    """

    residual: Tensor
    normed: Tensor
    norm: str
    norm_weight: Tensor | None
    norm_bias: Tensor | None
    norm_eps: float | None  # None where the norm does not store it
    unembedding: Tensor
    unembedding_bias: Tensor | None
    logits: Tensor
    transformed: str | None = None  # a module between a layer's output projection and the residual stream
    dtype: torch.dtype = torch.float32  # what the model ran in: its rounding bounds how closely the norm is read
    join_scales: tuple[Reading, ...] = ()  # per attention call: c in r + c·o
    head_scale: Reading = NOT_APPLICABLE  # the LM head reads the final norm's output times this
    logit_scale: Reading = NOT_APPLICABLE  # the model's logits are the LM head's output times this


def _same(a: Tensor, b: Tensor) -> bool:
    """Whether two tensors are the same values in memory: one object, or a full view of it (Llama slices its last
    hidden states, ``[:, slice(-0), :]``, before the LM head)."""
    return a is b or (a.shape == b.shape and a.data_ptr() == b.data_ptr() and a.stride() == b.stride())


@contextmanager
def reading_out(model: nn.Module, projections: Sequence[nn.Module] = ()) -> Iterator[dict]:
    """Within this block, this thread's next pass records the LM head's input and the final norm that made it:
    {"head": (module, input), "norm": (module, input, output)}, and "transformed": the first module that took an
    output projection's output as its input (a norm after the attention, as Gemma 2's: a head's part of the
    residual stream is then not z·W_O). Nothing is recorded when the model has no LM head (an encoder)."""
    owner = threading.get_ident()
    seen: dict = {}
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, nn.Linear):
        yield seen
        return
    recent: list[tuple[nn.Module, Tensor, Tensor]] = []  # the last leaf modules' (module, input, output)

    projected: list[Tensor] = []  # this pass's output projections' outputs
    wanted = {id(module) for module in projections}
    inputs: list[Tensor] = []  # the last leaf inputs: where a projection's output may have joined from
    outputs: list[Tensor] = []  # the last leaf outputs: with ``inputs``, what existed before a projection ran
    joins: dict[int, Reading] = seen.setdefault("joins", {})  # projection call -> c and its verdict
    pending: list[Tensor] = []  # the last projection's output, until a module reads something else

    def keep(module, args, output):
        if threading.get_ident() != owner or not isinstance(output, Tensor) or not args:
            return
        x = args[0]
        if not isinstance(x, Tensor):
            return
        recent.append((module, x, output))
        del recent[:-RECENT]
        if id(module) in wanted:
            projected.append(output)
            pending[:] = [output]
        elif pending and _same(x, pending[0]):
            if output is not x:  # a dropout in eval returns its input
                seen.setdefault("transformed", type(module).__name__)
                joins[len(projected) - 1] = Reading.not_determined()
                pending.clear()
        elif pending:  # the first module to read past the projection's output: x = r + c·o for an earlier input r?
            joins[len(projected) - 1] = join_reading(x, pending[0], inputs, outputs)
            pending.clear()
        inputs.append(x)
        outputs.append(output)
        del inputs[:-CANDIDATES], outputs[:-CANDIDATES]

    def at_head(module, args):
        if threading.get_ident() == owner and args:
            seen["head"] = (module, args[0])
            pending.clear()
            # the module that made the head's input, passing over identities (a dropout in eval returns its input)
            found = [entry for entry in recent if _same(entry[2], args[0]) and not _same(entry[1], args[0])]
            if found:
                seen["norm"] = found[-1]
                return
            for entry in reversed(recent):  # or a module's output times k, in arithmetic between them
                if entry[2] is entry[1] or _same(entry[2], entry[1]):
                    continue
                k = _head_input_scale(args[0], entry[2])
                if k is not None:
                    seen["norm"], seen["head_scale"] = entry, k
                    return

    def head_output(module, args, output):
        if threading.get_ident() == owner and isinstance(output, Tensor):
            seen["head_last"] = output[0, -1].detach()  # (vocab,): one position tells a scale of the logits

    leaves = [m for m in model.modules() if m is not head and (not len(list(m.children())) or id(m) in wanted)]
    hooks = [m.register_forward_hook(keep) for m in leaves]
    hooks.append(head.register_forward_pre_hook(at_head))
    hooks.append(head.register_forward_hook(head_output))
    try:
        yield seen
    finally:
        for hook in hooks:
            hook.remove()


def _fitted(y: Tensor, x: Tensor, rounding: Tensor, eps: float) -> float | None:
    """The c of y = c·x (float64, flat), each element weighted by its own ``rounding`` (what the dtype may have
    rounded it by), when every element fits within twice that (and c's own uncertainty) and c is told to 1 %;
    snapped to 1 where it is 1 within its precision. None where x is not in y (c indistinguishable from 0), some
    element does not fit, or x is too small beside the rounding to tell c."""
    w2 = (rounding + 1e-30).pow(-2)
    weight = float((w2 * x * x).sum())
    if weight == 0.0:
        return None
    c = float((w2 * y * x).sum()) / weight
    sigma = weight**-0.5  # c's uncertainty from the rounding
    if abs(c) <= 4 * sigma or not bool(((y - c * x).abs() <= 2 * rounding + 4 * sigma * x.abs() + 1e-30).all()):
        return None
    if sigma > 0.01 * max(1.0, abs(c)):
        return None
    return 1.0 if abs(c - 1.0) <= 4 * sigma + 4 * eps else c


def join_scale(x: Tensor, o: Tensor, inputs: Sequence[Tensor]) -> float | None:
    """The c with x = r + c·o, for the latest of ``inputs`` (r) that gives one (:func:`_fitted`); None where none
    does (a parallel block's MLP reads the layer's normed input, not the stream after the attention) or o is too
    small beside the stream's rounding to tell c.

    Element by element, x = r + c·o rounded in x's dtype is off by at most half a unit in the last place of x and
    of c·o: each element is weighted by its own rounding, so a few large dimensions of the stream do not hide the
    rest."""
    if not o.is_floating_point() or o.shape != x.shape:
        return None
    eps = torch.finfo(x.dtype).eps
    x64, o64 = x.double().flatten(), o.double().flatten()
    for r in reversed(inputs):
        if r.shape != x.shape or r.dtype != x.dtype or r.device != x.device:
            continue
        r64 = r.double().flatten()
        d = x64 - r64
        c = _fitted(d, o64, eps * (x64.abs() + r64.abs() + d.abs()) / 2, eps)
        if c is not None:
            return c
    return None


def join_reading(x: Tensor, o: Tensor, inputs: Sequence[Tensor], earlier: Sequence[Tensor]) -> Reading:
    """How the projection's output ``o`` joins the stream, read where the first module past it reads ``x``: found
    (:func:`join_scale`); not applicable where ``x`` existed before the projection ran (one of ``inputs`` or of the
    ``earlier`` outputs): a parallel block, whose MLP reads the layer's normed input and whose attention output
    joins the stream beside the MLP's, with no scale of its own to read; not determined otherwise."""
    c = join_scale(x, o, inputs)
    if c is not None:
        return Reading.found(c)
    if any(_same(x, r) for r in (*inputs, *earlier)):
        return Reading.not_applicable()
    return Reading.not_determined()


def _head_input_scale(head_input: Tensor, normed: Tensor) -> float | None:
    """k with the LM head's input = k × the final norm's output (MiniCPM 3 divides by ``logits_scaling``, Inkling
    by its width multiplier, in plain arithmetic), or None."""
    if not normed.is_floating_point() or normed.shape != head_input.shape:
        return None
    eps = torch.finfo(head_input.dtype).eps
    h64, y64 = head_input.double().flatten(), normed.double().flatten()
    return _fitted(h64, y64, eps * h64.abs(), eps)


def _logit_scale(head_last: Tensor | None, logits_last: Tensor) -> Reading:
    """s with the model's logits = s × its LM head's output (at the last position): not applicable where they are
    the same values, found where one s fits, not determined where none does (a soft cap) or the head's output was
    not seen."""
    if head_last is None or head_last.shape != logits_last.shape:
        return Reading.not_determined()
    if torch.equal(head_last, logits_last):
        return Reading.not_applicable()
    eps = torch.finfo(head_last.dtype).eps
    l64, h64 = logits_last.double().flatten(), head_last.double().flatten()
    s = _fitted(l64, h64, eps * l64.abs(), eps)
    return Reading.not_determined() if s is None else Reading.found(s)


def read_out(seen: dict, logits: Tensor) -> ReadOut | str:
    """The :class:`ReadOut` of a :func:`reading_out` pass (``logits``: the model's, (B, T, vocab)), or why none."""
    if "head" not in seen:
        return "it has no LM head"
    if "norm" not in seen:
        return "its LM head does not read a final norm's output directly"
    head, _ = seen["head"]
    norm, residual, normed = seen["norm"]
    with align_module_device(head):
        weight = head.weight.detach().float().cpu()  # (vocab, d_model)
        bias = None if head.bias is None else head.bias.detach().float().cpu()
    weight_, bias_, eps = norm_parameters(norm)
    return ReadOut(
        residual=residual[0].detach().float().cpu(),
        normed=normed[0].detach().float().cpu(),
        norm=type(norm).__name__,
        norm_weight=weight_,
        norm_bias=bias_,
        norm_eps=eps,
        unembedding=weight,
        unembedding_bias=bias,
        logits=logits[0].detach().float().cpu(),
        dtype=normed.dtype,
        transformed=seen.get("transformed"),
        join_scales=tuple(
            seen["joins"].get(i, Reading.not_determined()) for i in range(max(seen["joins"], default=-1) + 1)
        ),
        head_scale=Reading.found(seen["head_scale"]) if "head_scale" in seen else Reading.not_applicable(),
        logit_scale=_logit_scale(seen.get("head_last"), logits[0, -1].detach()),
    )


def norm_parameters(norm: nn.Module) -> tuple[Tensor | None, Tensor | None, float | None]:
    """A norm module's weight (d,), bias (d,) (None where it has none) and epsilon, float32 on the CPU."""
    with align_module_device(norm):
        weight = getattr(norm, "weight", None)
        bias = getattr(norm, "bias", None)
        weight = weight.detach().float().cpu().clone() if isinstance(weight, Tensor) else None
        bias = bias.detach().float().cpu().clone() if isinstance(bias, Tensor) else None
    eps = next((getattr(norm, name) for name in ("eps", "variance_epsilon", "epsilon") if hasattr(norm, name)), None)
    return weight, bias, None if eps is None else float(eps)  # None: not stored (OLMo's LayerNorm passes 1e-5)

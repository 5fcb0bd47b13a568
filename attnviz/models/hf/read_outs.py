"""What turns the last residual stream into logits, read once per loaded model by data flow (:class:`ReadOuts`),
and what one pass read through it (:class:`ReadOut`).

For direct logit attribution, one probe pass of the reference text (:func:`reading_out`, the ``read_out`` point of
:func:`attnviz.models.hf.points.run`) finds what turns the last residual stream into logits: the LM head (the model's
output embeddings) and the module whose output it reads (the final norm); and, by data flow, how each layer's
attention output joins the residual stream (the first module after the projection reads x = r + c·o, r an earlier
module's input: c is 1 in most models, Granite's ``residual_multiplier`` or MiniCPM's depth scale in others, applied
without a module) and how the model's logits relate to its LM head's output (Granite divides them by
``logits_scaling``). Each of these readings carries its verdict (:class:`~attnviz.models.readings.Reading`): found,
not applicable (a parallel block's MLP reads the layer's input, not the stream after the attention; logits that are
the LM head's own output) or not determined, never a silent 1.0. They are the model's, not a text's: read once, on
a text long enough to tell them, and every later pass reads only the final norm's input and output (the
``norm.final`` point of the hook map they return) and the logits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import torch
from accelerate.utils import align_module_device
from torch import Tensor, nn

from attnviz.models.hf.points import HookMap, owned
from attnviz.models.readings import NOT_APPLICABLE, Reading
from attnviz.models.weights_check import REFERENCE_TEXT, REFERENCE_TOKENS

RECENT = 8  # leaf modules remembered before the LM head runs: the final norm is among the last
CANDIDATES = 32  # leaf inputs remembered as a projection's residual r (a layer's input is a few modules back)


@dataclass(frozen=True, eq=False)
class ReadOut:
    """What turned one pass's last residual stream into logits (batch row 0).

    residual: (T, d_model), what entered the final norm; normed: (T, d_model), what left it (the LM head's input):
    both float32 on the CPU; norm: the final norm's class name; norm_weight, norm_bias: (d_model,) or None, float32
    on the CPU; norm_eps; logits: (T, vocab), the model's own, as it gave them (its dtype, on its device: a lab
    brings to the host only the entries it reads); lm_head: the LM head, whose rows :meth:`unembedding_rows` reads,
    never its whole weight. A pass's read-out is used as it returns and never cached: it holds the module.
    """

    residual: Tensor
    normed: Tensor
    norm: str
    norm_weight: Tensor | None
    norm_bias: Tensor | None
    norm_eps: float | None  # None where the norm does not store it
    lm_head: nn.Module = field(repr=False)
    logits: Tensor = field(repr=False)
    transformed: str | None = None  # a module between a layer's output projection and the residual stream
    dtype: torch.dtype = torch.float32  # what the model ran in: its rounding bounds how closely the norm is read
    join_scales: tuple[Reading, ...] = ()  # per attention call: c in r + c·o
    head_scale: Reading = NOT_APPLICABLE  # the LM head reads the final norm's output times this
    logit_scale: Reading = NOT_APPLICABLE  # the model's logits are the LM head's output times this

    def unembedding_rows(self, ids: Sequence[int]) -> tuple[Tensor, Tensor | None]:
        """The LM head's rows for the tokens ``ids``: weight (len(ids), d_model) and bias (len(ids),) or None, in the
        head's dtype on its device (an offloaded head read where accelerate brings it): never a copy of its whole
        (vocab, d_model) weight (4.2 GB in float32 for Llama 3 70B's 128,256 × 8,192)."""
        head = self.lm_head
        with align_module_device(head):
            index = torch.as_tensor(list(ids), dtype=torch.long, device=head.weight.device)  # (n,)
            weight = head.weight.detach().index_select(0, index)  # (n, d_model)
            bias = None if head.bias is None else head.bias.detach().index_select(0, index)  # (n,)
        return weight, bias


def _same(a: Tensor, b: Tensor) -> bool:
    """Whether two tensors are the same values in memory: one object, or a full view of it (Llama slices its last
    hidden states, ``[:, slice(-0), :]``, before the LM head)."""
    return a is b or (a.shape == b.shape and a.data_ptr() == b.data_ptr() and a.stride() == b.stride())


@contextmanager
def reading_out(hook_map: HookMap) -> Iterator[dict]:
    """The ``read_out`` hook of a pass (entered around it): this context's pass through ``hook_map``'s model records the LM head's input and the final norm that made it:
    {"head": (module, input), "norm": (module, input, output)}, and "transformed": the first module that took an
    output projection's output as its input (a norm after the attention, as Gemma 2's: a head's part of the
    residual stream is then not z·W_O). Nothing is recorded when the model has no LM head (an encoder)."""
    seen: dict = {}
    model = hook_map.model
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, nn.Linear):
        yield seen
        return
    ownership = ExitStack()
    mine = ownership.enter_context(owned())  # the hooks act only in this context's pass
    recent: list[tuple[nn.Module, Tensor, Tensor]] = []  # the last leaf modules' (module, input, output)

    projected: list[Tensor] = []  # this pass's output projections' outputs
    wanted = {id(module) for module, _, _ in hook_map.projections}
    inputs: list[Tensor] = []  # the last leaf inputs: where a projection's output may have joined from
    outputs: list[Tensor] = []  # the last leaf outputs: with ``inputs``, what existed before a projection ran
    joins: dict[int, Reading] = seen.setdefault("joins", {})  # projection call -> c and its verdict
    pending: list[Tensor] = []  # the last projection's output, until a module reads something else

    def keep(module, args, output):
        if not mine() or not isinstance(output, Tensor) or not args:
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
        if mine() and args:
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
        if mine() and isinstance(output, Tensor):
            seen["head_last"] = output[0, -1].detach()  # (vocab,): one position tells a scale of the logits

    leaves = [m for m in model.modules() if m is not head and (not len(list(m.children())) or id(m) in wanted)]
    hooks = [m.register_forward_hook(keep) for m in leaves]
    hooks.append(head.register_forward_pre_hook(at_head))
    hooks.append(head.register_forward_hook(head_output))
    try:
        yield seen
    finally:
        ownership.close()
        for hook in hooks:
            hook.remove()


def _fitted(y: Tensor, x: Tensor, rounding: Tensor, eps: float) -> float | None:
    """The c of y = c·x (float64, flat), each element weighted by its own ``rounding`` (what the dtype may have
    rounded it by), when every element fits within twice that (and c's own uncertainty) and c is told to 1 %;
    snapped to 1 where it is 1 within its precision. None where x is not in y (c indistinguishable from 0), some
    element does not fit, or x is too small beside the rounding to tell c; rounded to float32 where that is within
    c's uncertainty (what torch multiplies by)."""
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
    if abs(c - 1.0) <= 4 * sigma + 4 * eps:
        return 1.0
    # a scale in plain arithmetic is a Python float that torch applies as a float32 (the op's own type, or the
    # float32 arithmetic of a lower-precision op): the float32 nearest the fit, where the fit cannot tell them apart
    single = float(torch.tensor(c, dtype=torch.float32))
    return single if abs(single - c) <= 4 * sigma else c


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


@dataclass(frozen=True, eq=False)
class ReadOuts:
    """What turns a model's last residual stream into logits, read once per loaded model (:func:`read_outs_of`).

    hook_map: the model's hook map with the final norm's point, ``norm.final`` (None where ``why``); why: why there
    is none to read ("it has no LM head", ...), else None; norm: the final norm's class name; norm_weight, norm_bias:
    (d_model,) or None, float32 on the CPU; norm_eps; lm_head: the LM head; transformed: a module between a layer's
    output projection and the residual stream, or None; join_scales (per attention call), head_scale, logit_scale:
    each with its verdict. Held by the source for as long as the model is loaded, never by a cached result.
    """

    hook_map: HookMap | None
    why: str | None = None
    norm: str = ""
    norm_weight: Tensor | None = None
    norm_bias: Tensor | None = None
    norm_eps: float | None = None
    lm_head: nn.Module | None = field(default=None, repr=False)
    transformed: str | None = None
    join_scales: tuple[Reading, ...] = ()
    head_scale: Reading = NOT_APPLICABLE
    logit_scale: Reading = NOT_APPLICABLE

    def of_pass(self, residual: Tensor, normed: Tensor, logits: Tensor) -> ReadOut:
        """One pass's :class:`ReadOut` (batch row 0): what entered and left the final norm, (B, T, d_model) each, as
        the ``norm.final`` point gave them, and the model's logits (B, T, vocab)."""
        return ReadOut(
            residual=residual[0].detach().float().cpu(),
            normed=normed[0].detach().float().cpu(),
            norm=self.norm,
            norm_weight=self.norm_weight,
            norm_bias=self.norm_bias,
            norm_eps=self.norm_eps,
            lm_head=self.lm_head,
            logits=logits[0].detach(),
            dtype=normed.dtype,
            transformed=self.transformed,
            join_scales=self.join_scales,
            head_scale=self.head_scale,
            logit_scale=self.logit_scale,
        )


def find_read_outs(source) -> ReadOuts:
    """A Hugging Face source's :class:`ReadOuts`, read once per loaded model on a probe pass of the reference text
    (:data:`~attnviz.models.weights_check.REFERENCE_TEXT`, about 35 tokens: long enough that a scale told on it is
    the model's, where a one-token text might leave it not determined). An encoder's: it has no LM head."""
    if not source.can_generate:
        return ReadOuts(None, "it has no LM head")
    ids = source.encode(REFERENCE_TEXT, REFERENCE_TOKENS).ids
    input_ids = torch.tensor([ids], dtype=torch.long, device=source.device)  # (1, T)
    result = source.run_hooked(input_ids, {"read_out": reading_out(source.hook_map)})
    return read_outs_of(source.hook_map, result.read, result.output.logits)


def read_outs_of(hook_map: HookMap, seen: dict, logits: Tensor) -> ReadOuts:
    """The :class:`ReadOuts` of a :func:`reading_out` probe pass through ``hook_map``'s model (``logits``: the
    model's, (B, T, vocab)): the hook map gains the final norm's point."""
    if "head" not in seen:
        return ReadOuts(None, "it has no LM head")
    if "norm" not in seen:
        return ReadOuts(None, "its LM head does not read a final norm's output directly")
    head, _ = seen["head"]
    norm, _, _ = seen["norm"]
    weight_, bias_, eps = norm_parameters(norm)
    return ReadOuts(
        hook_map=dataclasses.replace(hook_map, final_norm=norm),
        norm=type(norm).__name__,
        norm_weight=weight_,
        norm_bias=bias_,
        norm_eps=eps,
        lm_head=head,
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

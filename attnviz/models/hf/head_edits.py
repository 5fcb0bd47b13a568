"""Each attention layer's heads read, replaced or differentiated where the output projection reads them.

The input of a layer's output projection W_O is its heads' outputs side by side, (B, T, n_head · head_dim)
(TransformerLens' ``hook_z``): a forward pre-hook on each projection found (:mod:`attnviz.models.hf.projections`)
hands it to an edit as (B, T, n_head, head_dim) and gives the projection what the edit returns. The same hook
serves both routes, the interface's and the eager one, and the layers are numbered by projection, so a pass that
skips its first layers (:mod:`attnviz.models.resume`) numbers the rest as a whole pass does.

For direct logit attribution, :func:`reading_out` finds what turns the last residual stream into logits: the
LM head (the model's output embeddings) and the module whose output it reads (the final norm), with what entered
and left that module.
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

RECENT = 8  # leaf modules remembered before the LM head runs: the final norm is among the last
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
    norm_eps: float
    unembedding: Tensor
    unembedding_bias: Tensor | None
    logits: Tensor
    transformed: str | None = None  # a module between a layer's output projection and the residual stream
    dtype: torch.dtype = torch.float32  # what the model ran in: its rounding bounds how closely the norm is read


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

    def keep(module, args, output):
        if threading.get_ident() == owner and isinstance(output, Tensor) and args and isinstance(args[0], Tensor):
            recent.append((module, args[0], output))
            del recent[:-RECENT]
            if id(module) in wanted:
                projected.append(output)
            elif output is not args[0] and any(_same(args[0], out) for out in projected[-1:]):
                seen.setdefault("transformed", type(module).__name__)  # a dropout in eval returns its input

    def at_head(module, args):
        if threading.get_ident() == owner and args:
            seen["head"] = (module, args[0])
            # the module that made the head's input, passing over identities (a dropout in eval returns its input)
            found = [entry for entry in recent if _same(entry[2], args[0]) and not _same(entry[1], args[0])]
            if found:
                seen["norm"] = found[-1]

    leaves = [m for m in model.modules() if m is not head and (not len(list(m.children())) or id(m) in wanted)]
    hooks = [m.register_forward_hook(keep) for m in leaves]
    hooks.append(head.register_forward_pre_hook(at_head))
    try:
        yield seen
    finally:
        for hook in hooks:
            hook.remove()


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
    )


def norm_parameters(norm: nn.Module) -> tuple[Tensor | None, Tensor | None, float]:
    """A norm module's weight (d,), bias (d,) (None where it has none) and epsilon, float32 on the CPU."""
    with align_module_device(norm):
        weight = getattr(norm, "weight", None)
        bias = getattr(norm, "bias", None)
        weight = weight.detach().float().cpu().clone() if isinstance(weight, Tensor) else None
        bias = bias.detach().float().cpu().clone() if isinstance(bias, Tensor) else None
    eps = next((getattr(norm, name) for name in ("eps", "variance_epsilon", "epsilon") if hasattr(norm, name)), 1e-6)
    return weight, bias, float(eps)

"""Reading a shared model's pass from outside it: forward hooks that keep only this thread's tensors.

A loaded model is shared read-only between sessions, so a hook registered for one request also sees every other
request's pass while it is in place: each hook here keeps a tensor only when the thread that registered it runs
the pass, and each is removed when its ``with`` block ends, whatever happened inside.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import torch
from torch import Tensor

from attnviz.errors import ModelUnavailableError
from attnviz.i18n.message import msg


@contextmanager
def last_hidden(model: torch.nn.Module, name: str) -> Iterator[list[Tensor]]:
    """Collect the last hidden states (B, T, d_model) of this thread's passes through ``model``: one per pass.

    Read from the base model, or, where a head model calls a part of it directly (OPT's ``self.model.decoder``),
    from the outermost direct child of it that returned a ``last_hidden_state``. ModelUnavailableError (naming
    ``name``) when neither gave one.
    """
    grabbed: list[Tensor] = []
    inner: list[Tensor] = []
    owner = threading.get_ident()
    base = getattr(model, "base_model", model)  # an encoder-decoder's encoder may be a plain module (FSMT's)

    def grab(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else getattr(output, "last_hidden_state", None)
        if threading.get_ident() == owner and isinstance(hidden, Tensor):  # not when the base is the LM itself
            grabbed.append(hidden)

    def grab_inner(module, args, output):
        hidden = getattr(output, "last_hidden_state", None)
        if threading.get_ident() == owner and isinstance(hidden, Tensor):
            inner.append(hidden)

    hooks = [base.register_forward_hook(grab)]
    hooks += [child.register_forward_hook(grab_inner) for child in base.children()]
    try:
        yield grabbed
    finally:
        for hook in hooks:
            hook.remove()
    if not grabbed and inner:
        grabbed.append(inner[-1])
    if not grabbed:
        raise ModelUnavailableError(msg("model_errors.no_hidden", name=name))


@contextmanager
def layer_inputs(modules: Mapping[int, torch.nn.Module]) -> Iterator[dict[int, Tensor]]:
    """The hidden states (1, T, d_model) that entered each of ``modules`` ({layer: its attention module}) in this
    thread's next pass, by layer: a forward pre-hook on each, the first call kept."""
    captured: dict[int, Tensor] = {}
    owner = threading.get_ident()

    def grabber(layer: int):
        def grab(module, args, kwargs):
            if threading.get_ident() == owner:  # the model is shared between sessions: only this thread's input
                captured.setdefault(layer, args[0] if args else kwargs["hidden_states"])

        return grab

    hooks = [module.register_forward_pre_hook(grabber(layer), with_kwargs=True) for layer, module in modules.items()]
    try:
        yield captured
    finally:
        for hook in hooks:
            hook.remove()


@contextmanager
def head_reads(head: torch.nn.Module, last_only: bool = True) -> Iterator[list[Tensor]]:
    """What the LM head ``head`` reads in this thread's passes, (B, T, d) each. ``last_only``: the head is given
    only the last position of it, so the pass's logits are (B, 1, vocab), and whoever wanted every position's forms
    them from what was read (:func:`attnviz.labs.reductions.kl_through_head`)."""
    read: list[Tensor] = []
    owner = threading.get_ident()

    def keep(module, args):
        if threading.get_ident() != owner or not args or not isinstance(args[0], Tensor):
            return None
        read.append(args[0])
        return (args[0][..., -1:, :], *args[1:]) if last_only else None

    hook = head.register_forward_pre_hook(keep)
    try:
        yield read
    finally:
        hook.remove()

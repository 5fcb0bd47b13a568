"""A transformers model the user already holds in memory (a notebook's), lent to attnviz for a block and given back
as it was: :func:`borrow`.

The loader (:mod:`attnviz.models.hf.loading`) builds its model itself, with attnviz's attention from the start. A
notebook's model was built by its user: any dtype, a device map, fine-tuned or patched, usually with torch's
``sdpa`` attention, often in training mode. For the block, :func:`borrow` switches it to attnviz's attention
implementation (the capture's route) or to the model's own eager attention (the eager route, as the loader chooses
it: by the class, then a probe of a few tokens), puts it in eval mode with no gradients kept on its weights, and
builds the same :class:`~attnviz.models.hf.source.HFSource` (or
:class:`~attnviz.models.hf.seq2seq.Seq2SeqSource`) a loaded model gets, so every lab runs on it unchanged. On the
way out everything is put back: each config's attention implementation, training mode, each weight's
``requires_grad``, and every hook and wrapped forward the hook points put on its modules
(:func:`attnviz.models.hf.points.uninstall`), and the hooks transformers itself adds on a first
``output_attentions=True`` pass: the model's outputs after equal its outputs before, bit for bit,
and nothing of attnviz is left on it. Nothing is written to disk.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from attnviz.core.memory_errors import is_out_of_memory, one_line
from attnviz.errors import ModelUnavailableError, first_line
from attnviz.i18n.message import msg
from attnviz.models.hf import points
from attnviz.models.hf.attention import IMPLEMENTATION, register
from attnviz.models.hf.loading import (
    LM_SUFFIXES,
    PROBE_TOKENS,
    check_config,
    check_tokenizer,
    probe_eager,
    probe_interface,
)
from attnviz.models.hf.placement import main_device
from attnviz.models.hf.source import HFSource, attention_modules


def _configs(model: torch.nn.Module) -> list:
    """Every config object the model's attention implementation is read from: each submodel's config and, at any
    depth, their sub-configs (each once)."""
    found: dict[int, object] = {}
    queue = [getattr(m, "config", None) for m in model.modules()]
    while queue:
        config = queue.pop()
        if config is None or id(config) in found or not hasattr(config, "_attn_implementation_internal"):
            continue
        found[id(config)] = config
        queue.extend(getattr(config, key, None) for key in getattr(config, "sub_configs", {}) or {})
    return list(found.values())


def _name(model: torch.nn.Module, name: str | None) -> str:
    if name:
        return name
    where = getattr(model.config, "name_or_path", "") or ""
    return Path(where).name or where or type(model).__name__


def _checked(model: object, tokenizer: object) -> None:
    """ModelUnavailableError, one line, for what is not a transformers model and its tokenizer."""
    if not isinstance(model, torch.nn.Module) or getattr(model, "config", None) is None:
        raise ModelUnavailableError(msg("in_memory.not_a_model", kind=type(model).__name__))
    if not callable(getattr(tokenizer, "convert_ids_to_tokens", None)) or not callable(tokenizer):
        raise ModelUnavailableError(msg("in_memory.not_a_tokenizer", kind=type(tokenizer).__name__))
    if getattr(model.config, "text_config", None) is not None and not getattr(model.config, "is_encoder_decoder", 0):
        # a multimodal wrapper: attnviz reads its text model, which the user can hand over as it is
        raise ModelUnavailableError(msg("in_memory.multimodal", kind=type(model).__name__))


def _switch(model: torch.nn.Module, implementation: str) -> bool:
    """Ask transformers to run ``model``'s attention through ``implementation``; whether every config says so now
    (a class that does not follow transformers' attention interface keeps its own, with a warning)."""
    try:
        model.set_attn_implementation(implementation)
    except (ValueError, AttributeError, ImportError):
        return False
    return model.config._attn_implementation == implementation


def _route(model: torch.nn.Module, vocab: int, name: str) -> tuple[str, bool]:
    """The route the capture takes on ``model`` and whether its attention is causal, as the loader decides it."""
    interface = getattr(type(model), "_supports_attention_backend", False)
    if interface and _switch(model, IMPLEMENTATION) and probe_interface(model, vocab):
        modules = attention_modules(model)
        causal = any(m.is_causal for m in modules) if modules else bool(getattr(model.config, "is_decoder", 0))
        return "interface", causal
    if not _switch(model, "eager") and model.config._attn_implementation != "eager":
        raise ModelUnavailableError(msg("in_memory.no_eager", name=name, kind=type(model).__name__))
    return "eager", probe_eager(model, vocab, name)


def _source(model: torch.nn.Module, tokenizer: object, name: str) -> HFSource:
    """The source of a lent model, switched for attnviz (what :func:`borrow` undoes)."""
    config = model.config
    device = main_device(model, "cpu")
    if getattr(config, "is_encoder_decoder", False):
        from attnviz.models.hf.loading import _stacks
        from attnviz.models.hf.seq2seq import seq2seq_source

        for stack in _stacks(config):
            check_config(stack, name)
        if not _switch(model, "eager") and config._attn_implementation != "eager":
            raise ModelUnavailableError(msg("in_memory.no_eager", name=name, kind=type(model).__name__))
        check_tokenizer(tokenizer, model, name)
        return seq2seq_source(model, tokenizer, name, "", device)
    check_config(config, name)
    check_tokenizer(tokenizer, model, name)
    route, causal = _route(model, int(config.vocab_size), name)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    with_lm_head = head is not None or type(model).__name__.endswith(LM_SUFFIXES)
    return HFSource(
        name=name,
        source="",
        model=model,
        tokenizer=tokenizer,
        device=device,
        causal=causal,
        can_generate=with_lm_head and causal,
        route=route,
    )


TRANSFORMERS_HOOKED = "_output_capturing_hooks_installed"  # transformers' mark: its output-recording hooks are on
_UNSET = object()


def _remove_hooks_since(hooks: list, marks: list) -> None:
    """Take off every forward hook put on a module since ``hooks`` was read (each module's hook ids then), and put
    back transformers' mark of its own hooks: the first ``output_attentions=True`` pass (the eager route's) makes
    transformers hook every layer to record their outputs, which the user's model did not have before."""
    for module, forward, pre in hooks:
        for key in [k for k in module._forward_hooks if k not in forward]:
            del module._forward_hooks[key]
            module._forward_hooks_with_kwargs.pop(key, None)
            module._forward_hooks_always_called.pop(key, None)
        for key in [k for k in module._forward_pre_hooks if k not in pre]:
            del module._forward_pre_hooks[key]
            module._forward_pre_hooks_with_kwargs.pop(key, None)
    for module, mark in marks:
        if mark is _UNSET:
            module.__dict__.pop(TRANSFORMERS_HOOKED, None)
        else:
            module.__dict__[TRANSFORMERS_HOOKED] = mark


@contextmanager
def borrow(model: torch.nn.Module, tokenizer: object, name: str | None = None) -> Iterator[HFSource]:
    """``model`` (a transformers model object, as the user has it) and its ``tokenizer`` as an attnviz source for
    the block, given back as they were on the way out, whatever happens inside (see the module's docstring).

    ModelUnavailableError (one line) for what attnviz cannot read: not a transformers model, a multimodal wrapper
    (hand over its text model), a config no model runs with, an architecture whose attention runs neither through
    transformers' interface nor eagerly; OutOfMemoryError (one line) where the probe pass does not fit."""
    _checked(model, tokenizer)
    name = _name(model, name)
    register()
    saved_implementations = [(config, config._attn_implementation_internal) for config in _configs(model)]
    training = [(module, module.training) for module in model.modules()]
    hooks = [(module, set(module._forward_hooks), set(module._forward_pre_hooks)) for module in model.modules()]
    marks = [(module, module.__dict__.get(TRANSFORMERS_HOOKED, _UNSET)) for module in model.modules()]
    # by name: accelerate swaps an offloaded weight's Parameter for a new one around each forward
    grads = {name: parameter.requires_grad for name, parameter in model.named_parameters(remove_duplicate=False)}
    try:
        model.eval().requires_grad_(False)
        try:
            source = _source(model, tokenizer, name)
        except ModelUnavailableError:
            raise
        except Exception as err:  # the model's own code failed on a few tokens under attnviz's attention
            if is_out_of_memory(err):
                raise one_line(err, main_device(model, "cpu")) from err
            raise ModelUnavailableError(
                msg("model_errors.could_not_run", name=name, error=first_line(err), n=PROBE_TOKENS)
            ) from err
        yield source
    finally:
        points.uninstall(model)
        _remove_hooks_since(hooks, marks)
        for config, implementation in saved_implementations:
            config._attn_implementation_internal = implementation
        for module, mode in training:
            module.training = mode
        for name, parameter in model.named_parameters(remove_duplicate=False):
            parameter.requires_grad_(grads.get(name, parameter.requires_grad))

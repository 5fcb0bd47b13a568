"""The Hugging Face source's passes with heads ablated or edited, and from the middle of the model.

:func:`ablated_pass` runs the model under a :class:`~attnviz.models.ablation.HeadAblation` (attnviz's attention on
the interface route, a hook on each output projection on the eager one), from a layer of a cached run when asked
(:mod:`attnviz.models.resume`); :func:`layer_cache` makes and checks that cache; :func:`head_pass` hands each
layer's head outputs to an edit (:mod:`attnviz.models.hf.head_edits`): read, replaced or differentiated. Each
takes the :class:`~attnviz.models.hf.source.HFSource` whose methods call it (not imported here: the source imports
this module).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch
from torch import Tensor

from attnviz.errors import ModelUnavailableError, first_line
from attnviz.i18n.message import msg
from attnviz.models.ablation import HeadAblation
from attnviz.models.hf import eager, hooks
from attnviz.models.hf.attention import ablating
from attnviz.models.hf.head_edits import HeadEdit, ReadOut, editing, read_out, reading_out
from attnviz.models.hf.hooks import last_hidden
from attnviz.models.hf.projections import probe_ids
from attnviz.models.resume import CachedLayers, cached_layers, caching, layer_list, outputs_match, resuming
from attnviz.models.source import AblatedOutputs, Encoding, running


def _unchanged(layer: int, z: Tensor) -> Tensor:
    return z


@torch.no_grad()
def ablated_outputs(
    source,
    text: str,
    max_tokens: int,
    head_sets: Sequence[Sequence[tuple[int, int]]],
    mode: str,
    resume: CachedLayers | None = None,
    head_reads: bool = False,
) -> AblatedOutputs:
    """One batch, a row per set of heads: every position's next-token logits (an LM) or last hidden states.
    ``resume``: the text's :meth:`layer_cache`; the pass then starts at the layer of the earliest head asked.
    ``head_reads`` (a source whose :meth:`unembedding` is not None): what the LM head reads instead of the logits,
    (R, T, d) in the model's dtype (``AblatedOutputs.head_reads``)."""
    if mode not in source.ablation_modes:
        raise ModelUnavailableError(msg("ablation_lib.unsupported", name=source.name, mode=mode))
    encoding = source.encode(text, max_tokens)
    rows = [list(heads) for heads in head_sets] or [[]]
    input_ids = torch.tensor([encoding.ids] * len(rows), dtype=torch.long, device=source.device)  # (R, T)
    ablation = HeadAblation(rows, mode, source.n_head)
    first = min((layer for heads in rows for layer, _ in heads), default=None)
    start = resume.start_for(first) if resume is not None and first is not None else 0
    if head_reads:
        with hooks.head_reads(source.model.get_output_embeddings()) as read:
            ablated_pass(source, input_ids, ablation, resume, start)
        return AblatedOutputs(
            encoding=encoding, values=read[-1].detach(), logits=True, layers_run=ablation.layers_seen, head_reads=True
        )
    values, _ = ablated_pass(source, input_ids, ablation, resume, start)
    return AblatedOutputs(
        encoding=encoding, values=values.float().cpu(), logits=source.can_generate, layers_run=ablation.layers_seen
    )


@torch.no_grad()
def unembedding(source) -> tuple[Tensor, Tensor | None] | None:
    """The LM head's weight (vocab, d) and bias when the model's next-token logits are exactly its product on what
    it reads (nothing after it: no scale, no cap), its weights on the CPU where the model runs; else None. Checked
    on a probe pass of 5 token ids: the model's logits against the head's product on what it read, bit for bit."""
    head = source.model.get_output_embeddings() if source.can_generate else None
    if not isinstance(head, torch.nn.Linear) or torch.device(source.device).type != "cpu":
        return None
    if head.weight.device.type != "cpu":  # offloaded (meta) or elsewhere
        return None
    with hooks.head_reads(head, last_only=False) as reads, running(source.name, source.device):
        logits = source.model(input_ids=probe_ids(source.model, head.out_features), return_dict=True).logits
    if not reads or reads[-1].shape[:-1] != logits.shape[:-1]:
        return None
    if not torch.equal(torch.nn.functional.linear(reads[-1], head.weight, head.bias), logits):
        return None
    return head.weight.detach(), None if head.bias is None else head.bias.detach()


def ablated_pass(
    source, input_ids: Tensor, ablation: HeadAblation, resume: CachedLayers | None, start: int, record=None
) -> tuple[Tensor, dict | None]:
    """The model's outputs (R, T, vocab or d_model) on ``input_ids`` under ``ablation``, from list layer
    ``start`` of ``resume`` on; ``record``: a callable given the attention-call counter, entered around the
    pass (:func:`attnviz.models.resume.caching`)."""
    if source.route == "interface":
        route = ablating(ablation)
    else:
        route = eager.ablating(source.output_projections.layers, source.n_head, ablation)
    with contextlib.ExitStack() as stack:
        stack.enter_context(route)
        seen = None
        if record is not None:  # the interface route counts attention calls itself; the eager one by projection
            if source.route == "interface":
                count = lambda: ablation.layers_seen  # noqa: E731
            else:
                called = stack.enter_context(editing(source.output_projections.layers, _unchanged))
                count = lambda: len(called)  # noqa: E731
            seen = stack.enter_context(record(count))
        before = stack.enter_context(resuming(resume, start, input_ids.shape[0]))
        if source.route == "interface":
            ablation.layers_seen = before
        hidden = stack.enter_context(last_hidden(source.model, source.name))
        stack.enter_context(running(source.name, source.device))
        out = source.model(input_ids=input_ids, return_dict=True)
    ablation.check_ran(source.name)
    return (out.logits if source.can_generate else hidden[-1]), seen


def decoder_layers(source) -> torch.nn.ModuleList | str:
    """The model's decoder-layer list (attnviz.models.resume), or why its passes cannot start mid-model."""
    if not source.output_projections.found:
        return "its output projections were not found"
    attention = [p.attention or p.module for p in source.output_projections.layers]
    layers = layer_list(source.model, attention)
    return layers if layers is not None else "no layer list holds its attention"


@torch.no_grad()
def layer_cache(source, text: str, max_tokens: int, mode: str = "zero") -> tuple[AblatedOutputs, CachedLayers | str]:
    """The text with nothing ablated (one pass, batch 1) and what each of the model's layers returned in it,
    checked by a pass from the middle layer that must give the same outputs; or why the model's passes cannot
    start mid-model (then every pass runs the whole forward)."""
    if mode not in source.ablation_modes:
        raise ModelUnavailableError(msg("ablation_lib.unsupported", name=source.name, mode=mode))
    encoding = source.encode(text, max_tokens)
    input_ids = torch.tensor([encoding.ids], dtype=torch.long, device=source.device)  # (1, T)
    layers = source._layers
    ablation = HeadAblation([[]], mode, source.n_head)
    if isinstance(layers, str):
        values, seen = ablated_pass(source, input_ids, ablation, None, 0)
    else:
        values, seen = ablated_pass(source, input_ids, ablation, None, 0, lambda count: caching(layers, count))
    outputs = AblatedOutputs(
        encoding=encoding, values=values.float().cpu(), logits=source.can_generate, layers_run=ablation.layers_seen
    )
    if isinstance(layers, str):
        return outputs, layers
    cache = cached_layers(layers, seen, ablation.layers_seen)
    if isinstance(cache, str) or len(cache.layers) < 2:
        return outputs, cache if isinstance(cache, str) else "it has one layer"
    middle = len(cache.layers) // 2
    twice = input_ids.expand(2, -1)  # (2, T): a batch of rows, as the sweep's passes are
    try:
        check, _ = ablated_pass(source, twice, HeadAblation([[], []], mode, source.n_head), cache, middle)
    except (ModelUnavailableError, RuntimeError, ValueError, TypeError, IndexError) as err:
        return outputs, f"a pass from its middle layer failed ({first_line(err)})"
    if not all(outputs_match(values[0], row) for row in check):
        return outputs, "a pass from its middle layer did not give the whole pass's outputs"
    return outputs, cache


def head_pass(
    source,
    encoding: Encoding,
    rows: int,
    edit: HeadEdit,
    *,
    grad: bool = False,
    resume: CachedLayers | None = None,
    first_layer: int = 0,
    read: bool = False,
) -> tuple[Tensor, ReadOut | str | None]:
    """The model on ``encoding``'s ids repeated in ``rows`` rows, each attention layer's z (R, T, n_head, head_dim) given to
    ``edit(layer, z)`` and W_O fed what it returns: every position's logits (R, T, vocab) or last hidden states,
    on the model's device, with a graph when ``grad``. ``resume`` (the text's :meth:`layer_cache`): start at the
    layer holding attention layer ``first_layer``. ``read``: also the :class:`ReadOut` of row 0 (or why none)."""
    if not source.edits_heads:
        raise ModelUnavailableError(msg("patching_lib.unsupported", name=source.name))
    input_ids = torch.tensor([list(encoding.ids)] * rows, dtype=torch.long, device=source.device)  # (R, T)
    start = resume.start_for(first_layer) if resume is not None else 0
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.enable_grad() if grad else torch.no_grad())
        first_call = stack.enter_context(resuming(resume, start, rows))  # the calls the skipped layers made
        stack.enter_context(editing(source.output_projections.layers, edit, first_call))
        projections = [p.module for p in source.output_projections.layers]
        seen = stack.enter_context(reading_out(source.model, projections)) if read else None
        hidden = stack.enter_context(last_hidden(source.model, source.name))
        stack.enter_context(running(source.name, source.device))
        out = source.model(input_ids=input_ids, return_dict=True)
    values = out.logits if source.can_generate else hidden[-1]
    return values, (read_out(seen, out.logits) if read and source.can_generate else None)

"""The Hugging Face source's passes with heads ablated or edited, and from the middle of the model: hook functions
handed to its one pass (:func:`attnviz.models.hf.points.run`).

:func:`ablated_outputs` ablates heads (:func:`attnviz.models.ablation.ablation_hooks` at the ``attn.z`` point),
from a layer of a cached run when asked (:mod:`attnviz.models.resume`); :func:`layer_cache` makes and checks that
cache (the ``resid.post`` point); :func:`head_pass` hands each layer's head outputs to an edit: read, replaced or
differentiated. Each takes the :class:`~attnviz.models.hf.source.HFSource` whose methods call it (not imported
here: the source imports this module).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from attnviz.errors import ModelUnavailableError, first_line
from attnviz.i18n.message import msg
from attnviz.models.ablation import ablation_hooks, check_ran
from attnviz.models.hf.points import HeadEdit, last_hidden
from attnviz.models.hf.projections import probe_ids
from attnviz.models.hf.read_outs import ReadOut
from attnviz.models.resume import CachedLayers, cached_layers, layer_list, outputs_match
from attnviz.models.source import AblatedOutputs, Capability, Encoding, PassResult


def _check_mode(source, mode: str) -> None:
    if mode not in source.ablation_modes:
        raise ModelUnavailableError(msg("ablation_lib.unsupported", name=source.name, mode=mode))


def _ids(ids: Sequence[int], rows: int, device) -> Tensor:
    return torch.tensor([list(ids)] * rows, dtype=torch.long, device=device)  # (R, T)


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
    (R, T, d) in the model's dtype (``AblatedOutputs.head_reads``): the head is given only the last position, and
    whoever wants every position's logits forms them from what was read
    (:func:`attnviz.labs.heads_matter.reductions.kl_through_head`)."""
    _check_mode(source, mode)
    encoding = source.encode(text, max_tokens)
    rows = [list(heads) for heads in head_sets] or [[]]
    first = min((layer for heads in rows for layer, _ in heads), default=None)
    start = resume.start_for(first) if resume is not None and first is not None else 0
    hooks = ablation_hooks(rows, mode, source.n_head)
    read: list[Tensor] = []
    if head_reads:

        def last_only(x: Tensor) -> Tensor:
            read.append(x)
            return x[..., -1:, :]

        hooks["unembed.in"] = last_only
    values, result = ablated_pass(source, _ids(encoding.ids, len(rows), source.device), rows, hooks, resume, start)
    if head_reads:
        return AblatedOutputs(
            encoding=encoding, values=read[-1].detach(), logits=True, layers_run=result.layers_run, head_reads=True
        )
    return AblatedOutputs(
        encoding=encoding, values=values.float().cpu(), logits=source.can_generate, layers_run=result.layers_run
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
    reads: list[Tensor] = []

    def keep(x: Tensor) -> Tensor:
        reads.append(x)
        return x

    result = source.run_hooked(probe_ids(source.model, head.out_features), {"unembed.in": keep})
    logits = result.output.logits
    if not reads or reads[-1].shape[:-1] != logits.shape[:-1]:
        return None
    if not torch.equal(torch.nn.functional.linear(reads[-1], head.weight, head.bias), logits):
        return None
    return head.weight.detach(), None if head.bias is None else head.bias.detach()


def ablated_pass(
    source,
    input_ids: Tensor,
    rows: Sequence[Sequence[tuple[int, int]]],
    hooks: dict[str, Callable],
    resume: CachedLayers | None,
    start: int,
) -> tuple[Tensor, PassResult]:
    """The model's outputs (R, T, vocab or d_model) on ``input_ids`` with ``hooks`` (``rows``' ablation among them),
    from list layer ``start`` of ``resume`` on, and the pass's result."""
    result = source.run_hooked(input_ids, hooks, resume=resume, start_at_layer=start)
    hidden = last_hidden(result, source.name)
    check_ran(rows, result.layers_run, source.name)
    return (result.output.logits if source.can_generate else hidden), result


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
    _check_mode(source, mode)
    encoding = source.encode(text, max_tokens)
    input_ids = _ids(encoding.ids, 1, source.device)  # (1, T)
    layers = source._layers
    hooks = ablation_hooks([[]], mode, source.n_head)
    outputs: dict[int, object] = {}
    order: list[int] = []

    def keep(layer: int, output: object) -> None:
        outputs[layer] = output
        order.append(layer)

    if not isinstance(layers, str):
        hooks["resid.post"] = keep
    values, result = ablated_pass(source, input_ids, [[]], hooks, None, 0)
    whole = AblatedOutputs(
        encoding=encoding, values=values.float().cpu(), logits=source.can_generate, layers_run=result.layers_run
    )
    if isinstance(layers, str):
        return whole, layers
    cache = cached_layers(len(layers), outputs, order, result.layer_starts, result.layers_run)
    if isinstance(cache, str) or len(cache.outputs) < 2:
        return whole, cache if isinstance(cache, str) else "it has one layer"
    middle = len(cache.outputs) // 2
    twice = input_ids.expand(2, -1)  # (2, T): a batch of rows, as the sweep's passes are
    try:
        check, _ = ablated_pass(source, twice, [[], []], ablation_hooks([[], []], mode, source.n_head), cache, middle)
    except (ModelUnavailableError, RuntimeError, ValueError, TypeError, IndexError) as err:
        return whole, f"a pass from its middle layer failed ({first_line(err)})"
    ran = len(cache.outputs) - middle  # the layers the check pass ran
    if not all(outputs_match(values[0], row, layers=ran, d_model=source.d_model) for row in check):
        return whole, "a pass from its middle layer did not give the whole pass's outputs"
    return whole, cache


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
    if Capability.EDIT_HEADS not in source.capabilities:
        raise ModelUnavailableError(msg("patching_lib.unsupported", name=source.name))
    start = resume.start_for(first_layer) if resume is not None else 0
    outs = source.read_outs if read and source.can_generate else None
    seen: dict[str, Tensor] = {}
    hooks: dict = {"attn.z": edit}
    if outs is not None and outs.hook_map is not None:
        hooks["norm.final"] = lambda residual, normed: seen.update(residual=residual, normed=normed)
    result = source.run_hooked(
        _ids(encoding.ids, rows, source.device),
        hooks,
        resume=resume,
        start_at_layer=start,
        grad=grad,
        hook_map=None if outs is None else outs.hook_map,
    )
    hidden = last_hidden(result, source.name)
    values = result.output.logits if source.can_generate else hidden
    if outs is None:
        return values, None
    if outs.why is not None or "normed" not in seen:
        return values, outs.why or "its final norm did not run"
    return values, outs.of_pass(seen["residual"], seen["normed"], result.output.logits)

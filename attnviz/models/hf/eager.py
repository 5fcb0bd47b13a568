"""The eager route: a model whose attention never calls transformers' ``AttentionInterface``.

BLOOM, Falcon, DeBERTa-v2, MPNet … compute attention in their own code, so attnviz never sees q, k or v. The
model runs its own eager attention with ``output_attentions=True`` and the record is built from the full weights
it returns (:func:`attnviz.core.capture.capture_weights`). That holds every weight, O(T²) per head, so a run is
bounded before it starts (:func:`check_bound`). Head ablation rewrites the input of each output projection found
by structure (:func:`attnviz.models.hf.projections.eager_output_projections`): the ``attn.z`` hook point there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from attnviz import settings
from attnviz.core.capture import CaptureSession, capture_weights
from attnviz.core.masks import KeyRanges
from attnviz.core.progress import Progress
from attnviz.errors import ModelUnavailableError
from attnviz.i18n.message import msg
from attnviz.models.hf.points import last_hidden


def eager_keys(weights: Tensor, causal: bool, start: int, end: int) -> KeyRanges:
    """The mask a layer of the eager route applied to one sequence, from its weights (n_head, T, T).

    Keys ``start .. end - 1`` are real (the rest pads); the layer is causal or
    not. Where the weights fall outside that reading (a layer that is not what
    the model says), the widest mask that holds them all.
    """
    T = weights.shape[-1]
    support = weights.detach().amax(dim=0) != 0  # (T, T): keys some head weighs
    candidates = [KeyRanges.causal(T, start=start, end=end)] if causal else []
    candidates += [KeyRanges.span(T, start, end), KeyRanges.full(T)]
    for keys in candidates:
        if not bool((support & ~keys.dense().to(support.device)).any()):
            return keys
    return candidates[-1]


def eager_bytes(n_layer: int, n_head: int, n_tokens: int, batch: int = 1) -> int:
    """What the eager route holds for ``batch`` sequences of ``n_tokens``: every weight, n_layer·n_head·T²·4 B."""
    return batch * n_layer * n_head * n_tokens * n_tokens * 4


def eager_max_tokens(n_layer: int, n_head: int, batch: int = 1) -> int:
    """The longest input the eager route may read within the bound (:func:`attnviz.settings.cache_bytes`)."""
    return max(1, math.isqrt(settings.cache_bytes() // max(1, batch * n_layer * n_head * 4)))


def check_bound(name: str, n_layer: int, n_head: int, n_tokens: int, batch: int = 1) -> None:
    """ModelUnavailableError (with the longest input that fits) when the weights would pass the bound."""
    need = eager_bytes(n_layer, n_head, n_tokens, batch)
    if need > settings.cache_bytes():
        raise ModelUnavailableError(
            msg(
                "model_errors.eager_too_long",
                name=name,
                tokens=n_tokens,
                batch=batch,
                need_mb=need / 2**20,
                bound_mb=settings.cache_bytes() / 2**20,
                fit=eager_max_tokens(n_layer, n_head, batch),
            )
        )


def session_from_weights(
    input_ids: Tensor,
    attentions: Sequence[Tensor],
    attention_mask: Tensor | None,
    causal: bool,
    head_dim: int,
    progress: Progress,
) -> CaptureSession:
    """A capture of the weights the model returned on ``input_ids`` (B, T), (B, n_head, T, T) per attention layer,
    as the capture would have taken them (q and k are not kept); ``attention_mask`` (B, T), 1 for real tokens
    (None: every token is real). ``progress`` gets a step per layer."""
    batch, T = input_ids.shape
    session = CaptureSession(batch, T, len(attentions) * attentions[0].shape[1], keep_qk=False)  # its bin, lists
    real = (attention_mask.bool() if attention_mask is not None else torch.ones(batch, T, dtype=torch.bool)).cpu()
    scale = 1.0 / math.sqrt(head_dim)
    for weights in attentions:  # (B, n_head, T, T) each
        for b, sequence in enumerate(session.layers):
            at = real[b].nonzero()[:, 0]
            start, end = (int(at[0]), int(at[-1]) + 1) if len(at) else (0, 0)
            w = weights[b].float()
            keys = eager_keys(w, causal, start, end)
            sequence.append(capture_weights(w.cpu(), keys, bin_size=session.bin_size, scale=scale))
        progress.step()
    return session


def capture(
    source,
    input_ids: Tensor,
    attention_mask: Tensor | None,
    position_ids: Tensor | None,
    progress: Progress,
) -> tuple[CaptureSession, Tensor, Tensor | None]:
    """The eager route: the model's own attention returns every weight; each layer is captured from them."""
    batch, T = input_ids.shape
    check_bound(source.name, source.n_layer, source.n_head, T, batch)
    result = source.run_hooked(
        input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        output_attentions=True,
        **source._logits_to_keep(),
    )
    out, hidden = result.output, last_hidden(result, source.name)
    attentions = [a for a in (getattr(out, "attentions", None) or ()) if a is not None]
    if not attentions:
        raise ModelUnavailableError(
            msg("model_errors.no_attentions", name=source.name, cls=type(source.model).__name__)
        )
    session = session_from_weights(input_ids, attentions, attention_mask, source.causal, source.head_dim, progress)
    logits = out.logits[:, -1].float().cpu() if source.can_generate and T else None
    return session, hidden.float().cpu(), logits

"""Whether a loaded Hugging Face decoder or encoder looks trained: the one short pass of
:mod:`attnviz.models.weights_check`, in the model's own dtype and on its device."""

from __future__ import annotations

import torch

from attnviz.errors import ModelUnavailableError
from attnviz.models.weights_check import (
    NOT_READ,
    REFERENCE_TEXT,
    REFERENCE_TOKENS,
    WeightsCheck,
    from_attention,
    from_logits,
    norms_at_init,
)


def check_weights(source) -> WeightsCheck:
    """A decoder with its LM head (``source.can_generate``): its next-token loss on the reference text; any other
    model: the spread of its heads on it (one captured pass, no q or k kept). A pass the model cannot run on the
    text (a bound, its own code) determines nothing: the pages then say nothing of its weights."""
    norms = norms_at_init(source.model)
    try:
        if not source.can_generate:
            return from_attention(source.run(REFERENCE_TEXT, REFERENCE_TOKENS, keep_qk=False), norms)
        ids = source.encode(REFERENCE_TEXT, REFERENCE_TOKENS).ids
        logits = source.run_hooked(torch.tensor([ids], device=source.device)).output.logits[0]  # no hook, no cache
    except (ModelUnavailableError, ValueError):
        return NOT_READ
    return from_logits(logits[:-1], torch.tensor(ids[1:]), "next_token", norms)  # position i predicts token i + 1

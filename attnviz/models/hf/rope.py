"""Which RoPE frequencies a loaded Hugging Face model applies, read from the model or, failing that, its config."""

from __future__ import annotations

from typing import Any

import torch

from attnviz.core.rope import rope_inverse_frequencies
from attnviz.models.source import RotaryFrequencies


def rope_frequencies(model: torch.nn.Module | None, config: Any, head_dim: int) -> RotaryFrequencies | None:
    """(head_dim / 2,) frequencies, looked for in order: a rotary embedding's ``inv_freq`` buffer of that width in
    ``model`` (exact, scaling included); ``rope_theta`` in ``config`` (or in its ``rope_scaling``), by Llama's
    default ``1 / theta^(2i / head_dim)``; else None (no RoPE: BERT, learned or relative positions)."""
    if hasattr(model, "named_buffers"):
        for name, buffer in model.named_buffers():
            if name.endswith("rotary_emb.inv_freq") and buffer.numel() == head_dim // 2:
                return RotaryFrequencies(buffer.detach().float().cpu().clone())
    theta = getattr(config, "rope_theta", None)
    scaling = getattr(config, "rope_scaling", None)
    if theta is None and isinstance(scaling, dict):
        theta = scaling.get("rope_theta")
    if theta is not None and head_dim % 2 == 0:
        return RotaryFrequencies(rope_inverse_frequencies(head_dim, float(theta)), theta=float(theta))
    return None

"""Rotary position embeddings (RoPE), as Llama-family models apply them to q and k.

Each pair of dimensions (i, i + head_dim/2) of q and k is rotated by the angle
``position * theta ** (-2i / head_dim)``, so q·k depends on the distance
between two positions, not on where they are.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnviz.core.attention import PositionRotation


def rope_inverse_frequencies(head_dim: int, theta: float) -> Tensor:
    """theta ** (-2i / head_dim) for i < head_dim / 2: (head_dim / 2,)."""
    if head_dim % 2:
        raise ValueError(f"RoPE needs an even head_dim, got {head_dim}")
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))


def rope_cos_sin(positions: Tensor, inv_freq: Tensor) -> tuple[Tensor, Tensor]:
    """Angles for each position: positions (..., seq) -> cos, sin (..., seq, head_dim)."""
    angles = positions[..., None].float() * inv_freq.to(positions.device)  # (..., seq, head_dim / 2)
    angles = torch.cat([angles, angles], dim=-1)  # (..., seq, head_dim)
    return angles.cos(), angles.sin()


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate x (batch, heads, seq, head_dim) by cos/sin (seq, head_dim) or (batch, seq, head_dim)."""
    if cos.ndim == 3:
        cos, sin = cos[:, None], sin[:, None]  # (batch, 1, seq, head_dim)
    return x * cos + rotate_half(x) * sin


def rope_rotation(head_dim: int, theta: float, scaling: float = 1.0) -> PositionRotation:
    """A ``rotate`` hook for :class:`attnviz.core.attention.MultiHeadAttention`."""
    inv_freq = rope_inverse_frequencies(head_dim, theta)

    def rotate(q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        cos, sin = rope_cos_sin(positions, inv_freq)
        cos, sin = (cos * scaling).to(q.dtype), (sin * scaling).to(q.dtype)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin)

    return rotate

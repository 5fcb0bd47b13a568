"""What cross-attention does between two texts: the measures that make sense across a source and a target.

In an encoder-decoder each target token (a decoder query) attends over the source's tokens (the encoder's
output). Positions of the two texts are not comparable one for one, so the self-attention measures that read a
query's own position ("previous token", "self", distance in tokens) have no meaning here. What does:

- **entropy**, **max weight** and the weight on the source's first token, per row, as for self-attention;
- **alignment offset**: how far a row's expected source position (its weights' centroid) lies from the diagonal,
  both positions as fractions of their text (0 on the diagonal, at most 1);
- **hard alignment**: each target token's most-attended source token (a translation's word alignment);
- **monotonicity**: Spearman's rank correlation between target positions and their hard alignment, in [-1, 1]
  (1: the alignment never goes back, as a translation of a similar word order does; 0 when it is constant). The
  heads ranked by it are the alignment heads, as Whisper's are chosen for timing;
- **coverage**: the mean over source tokens of min(1, the total weight the target puts on it): 1 when every source
  token is attended as much as a whole row's weight, as a translation that leaves nothing out.

Shapes: weights of one layer are (n_head, T, S), T target queries by S source keys.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnviz.core.ranking import spearman

CROSS_ROW_STATS = ("entropy", "max_weight", "first_token_weight", "alignment_offset", "lse")
CROSS_COLUMNS = (
    "entropy",
    "entropy_norm",
    "max_weight",
    "first_token_weight",
    "alignment_offset",
    "monotonicity",
    "coverage",
)


def alignment_offset(weights: Tensor, n_source: int) -> Tensor:
    """|centroid_i / S' - (i + ½) / T| for each row: (..., T, S) -> (..., T), S' = ``n_source`` real source tokens.

    The centroid is Σ_j w_ij · (j + ½); positions are taken at the middle of their token, so one target token
    on one source token sits on the diagonal (0).
    """
    T, S = weights.shape[-2:]
    source_at = (torch.arange(S, device=weights.device, dtype=torch.float32) + 0.5) / max(1, n_source)  # (S,)
    target_at = (torch.arange(T, device=weights.device, dtype=torch.float32) + 0.5) / max(1, T)  # (T,)
    return (weights.float() @ source_at - target_at).abs()


def hard_alignment(weights: Tensor) -> Tensor:
    """Each target token's most-attended source token: (..., T, S) -> (..., T) int64 (the first on a tie)."""
    return weights.argmax(dim=-1)


def monotonicity(weights: Tensor, rows: Tensor | None = None) -> Tensor:
    """Each head's monotonicity: (n_head, T, S) -> (n_head,) float32, over the target rows ``rows`` (bool (T,),
    default all)."""
    hard = hard_alignment(weights)  # (n_head, T)
    if rows is not None:
        hard = hard[:, rows.to(hard.device)]
    position = torch.arange(hard.shape[-1])
    rhos = (spearman(position, head.cpu()) for head in hard)
    return torch.tensor([0.0 if rho is None else rho for rho in rhos], dtype=torch.float32)  # a still head: 0


def coverage(weights: Tensor, n_source: int, rows: Tensor | None = None) -> Tensor:
    """Each head's coverage of the first ``n_source`` source tokens: (n_head, T, S) -> (n_head,) float32, over the
    target rows ``rows`` (bool (T,), default all)."""
    if rows is not None:
        weights = weights[:, rows.to(weights.device)]
    received = weights[..., :n_source].float().sum(dim=1)  # (n_head, n_source)
    return received.clamp(max=1.0).mean(dim=-1).cpu() if n_source else torch.zeros(weights.shape[0])

"""Per-head statistics over attention rows, and flags for the heads worth a look.

Each statistic is computed per query row and averaged over the rows that have
a choice to make: rows that see fewer than two keys are left out (a fully
masked row carries no weight; a row that sees one key, like the first row
under a causal mask, puts weight 1 on it whatever the head does, which would
push every head towards "saturated" and "sink").
Query ``i`` sits at absolute position ``offset + i``; ``offset`` defaults to
``k_len - q_len`` (queries are the last positions, as with a KV cache).
"""

from __future__ import annotations

import math

import pandas as pd
import torch
from torch import Tensor

from attnviz.core.attention import reduction_dtype
from attnviz.core.masks import check_mask, visible_keys
from attnviz.i18n.message import Message, msg

STAT_COLUMNS = (
    "entropy",
    "entropy_norm",
    "max_weight",
    "first_token_weight",
    "prev_token_weight",
    "self_weight",
    "mean_distance",
)

# A head is flagged when its row-averaged statistic crosses these lines.
UNIFORM_ENTROPY_NORM = 0.9
SATURATED_MAX_WEIGHT = 0.9
SINK_FIRST_TOKEN = 0.5
PREVIOUS_TOKEN = 0.5


def entropy(weights: Tensor) -> Tensor:
    """Shannon entropy in nats of each attention row: (..., k_len) -> (...); 0·log 0 = 0."""
    return -torch.special.xlogy(weights, weights).sum(dim=-1)


JS_MAX = math.log(2.0)  # ln 2 nats: the divergence of two rows with disjoint support


def js_divergence(p: Tensor, q: Tensor) -> Tensor:
    """Jensen–Shannon divergence in nats between rows of weights: (..., k_len) x (..., k_len) -> (...), float64
    on the CPU (float32 on an accelerator: :func:`attnviz.core.attention.reduction_dtype`).

    ½ KL(p ‖ m) + ½ KL(q ‖ m) with m = (p + q) / 2; it lies in [0, ln 2] and is
    symmetric. Zero weights (masked keys) contribute nothing (0 · log 0 = 0).
    """
    wide = reduction_dtype(p.device)
    p, q = p.to(wide), q.to(wide)
    m = (p + q) / 2
    kl_pm = (torch.special.xlogy(p, p) - torch.special.xlogy(p, m)).sum(dim=-1)  # (...)
    kl_qm = (torch.special.xlogy(q, q) - torch.special.xlogy(q, m)).sum(dim=-1)
    return (0.5 * (kl_pm + kl_qm)).clamp(0.0, JS_MAX)  # rounding can stray a hair outside


def normalized_entropy(weights: Tensor, n_visible: Tensor) -> Tensor:
    """Entropy divided by log(number of visible keys), in [0, 1]: (..., k_len) -> (...).

    1 means uniform over the visible keys, 0 one-hot. Undefined (NaN) for rows
    that see fewer than two keys, where every distribution is one-hot.
    """
    n_visible = n_visible.to(weights.dtype)
    log_n = torch.log(n_visible)
    return torch.where(n_visible >= 2, entropy(weights) / log_n.clamp_min(1e-12), torch.nan)


def row_statistics(weights: Tensor, mask: Tensor | None = None, offset: int | None = None) -> dict[str, Tensor]:
    """Every statistic for every row: weights (..., q_len, k_len) -> {name: (..., q_len)}.

    Rows that see fewer than two keys come back as NaN, so nan-means skip them.
    ``mask`` is bool (True = may attend) or additive float; TypeError for an
    integer mask. ValueError when there are no keys (k_len = 0).
    """
    check_mask(mask)
    q_len, k_len = weights.shape[-2:]
    if k_len == 0:
        raise ValueError(f"attention {tuple(weights.shape)} has k_len = 0: no key to compute a statistic over")
    offset = k_len - q_len if offset is None else offset
    weights = weights.float()
    n_visible = visible_keys(mask, q_len, k_len).to(weights.device)  # (..., q_len)
    n_visible = n_visible.expand(weights.shape[:-1])
    live = (n_visible >= 2) & (weights.sum(dim=-1) > 0.5)  # (..., q_len)

    q_pos = torch.arange(q_len, device=weights.device) + offset  # (q_len,)
    k_pos = torch.arange(k_len, device=weights.device)  # (k_len,)
    distance = (q_pos[:, None] - k_pos[None, :]).abs().float()  # (q_len, k_len)

    def diagonal(shift: int) -> Tensor:
        """Weight on key ``position - shift`` of each row (NaN where it does not exist)."""
        key = q_pos - shift  # (q_len,)
        ok = (key >= 0) & (key < k_len)
        picked = weights.gather(-1, key.clamp(0, k_len - 1).expand(weights.shape[:-1])[..., None])[..., 0]
        return torch.where(ok, picked, torch.nan)

    stats = {
        "entropy": entropy(weights),
        "entropy_norm": normalized_entropy(weights, n_visible),
        "max_weight": weights.amax(dim=-1),
        "first_token_weight": weights[..., 0],
        "prev_token_weight": diagonal(1),
        "self_weight": diagonal(0),
        "mean_distance": (weights * distance).sum(dim=-1),
    }
    return {name: torch.where(live, value, torch.nan) for name, value in stats.items()}


def head_statistics(attention: Tensor, mask: Tensor | None = None, offset: int | None = None) -> pd.DataFrame:
    """One row per head: attention (n_layer, n_head, q_len, k_len) -> DataFrame.

    A (n_head, q_len, k_len) tensor is taken as a single layer. Columns: layer,
    head, the :data:`STAT_COLUMNS` (row means) and ``flags``, a comma-separated
    list of uniform / saturated / sink / previous-token. TypeError for an integer
    ``mask``, ValueError for k_len = 0 (see :func:`row_statistics`).
    """
    if attention.ndim == 3:
        attention = attention[None]
    if attention.ndim != 4:
        raise ValueError(f"attention must be (n_layer, n_head, q_len, k_len), got {tuple(attention.shape)}")
    return summarize_rows(row_statistics(attention, mask, offset))


def summarize_rows(rows: dict[str, Tensor], first: tuple[str, ...] = STAT_COLUMNS) -> pd.DataFrame:
    """Per-row statistics {name: (n_layer, n_head, q_len)}, NaN on rows left out -> one row per head.

    Each of ``first`` (:data:`STAT_COLUMNS`: self-attention's), then every other statistic ``rows`` holds, is
    averaged over the rows that are not NaN; a head with no such row gets NaN and no flags.
    """
    n_layer, n_head = rows["entropy"].shape[:2]
    columns = [*first, *(name for name in rows if name not in first and name != "entropy")]
    means = {name: torch.nanmean(rows[name].float(), dim=-1) for name in columns}  # (n_layer, n_head)
    frame = pd.DataFrame(
        {
            "layer": [layer for layer in range(n_layer) for _ in range(n_head)],
            "head": [head for _ in range(n_layer) for head in range(n_head)],
            **{name: means[name].reshape(-1).cpu().numpy() for name in columns},
        }
    )
    frame["flags"] = [", ".join(head_flags(row)) for row in frame.to_dict("records")]
    return frame


def describe_flags() -> Message:
    """The flag rules in words, with the thresholds this module applies."""
    return msg(
        "head_stats.flags",
        uniform=UNIFORM_ENTROPY_NORM,
        saturated=SATURATED_MAX_WEIGHT,
        sink=SINK_FIRST_TOKEN,
        previous=PREVIOUS_TOKEN,
    )


def head_flags(stats: dict[str, float]) -> list[str]:
    """The notable patterns a head's averaged statistics show."""
    flags = []

    def above(name: str, line: float) -> bool:
        value = stats.get(name)
        return value is not None and not math.isnan(value) and value >= line

    if above("entropy_norm", UNIFORM_ENTROPY_NORM):
        flags.append("uniform")
    if above("max_weight", SATURATED_MAX_WEIGHT):
        flags.append("saturated")
    if above("first_token_weight", SINK_FIRST_TOKEN):
        flags.append("sink")
    if above("prev_token_weight", PREVIOUS_TOKEN):
        flags.append("previous-token")
    return flags

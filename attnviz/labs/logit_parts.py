"""Why a head attends where it does: one pre-softmax logit split into the parts that add up to it.

The logit of query t on key s in a head is ``q_t · k_s · scale = Σ_d q_t[d] k_s[d] scale``, so each
head dimension d contributes one exact term. Under RoPE (Llama's convention, :mod:`attnviz.core.rope`)
dimensions i and i + head_dim/2 are rotated together at the angular frequency ``inv_freq[i]``
(radians per token), so the pair's summed term is the natural unit: high-frequency pairs turn
fast with distance and so carry position, low-frequency pairs barely turn over a text and behave
like content. Models without RoPE (the embedded model, BERT) get the same pair view, but there a
pair is just two dimensions and has no frequency.

The record keeps q and k after RoPE, never whether the model used it, so the frequencies come
from the model source, a :class:`~attnviz.models.source.Rotates` (:func:`rope_frequencies`). Soft-capped models (Gemma-2) use
``softcap * tanh(logit / softcap)``; the parts here always add up to the logit before the cap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from attnviz.i18n.message import Message, Text, concat, msg
from attnviz.models.record import AttentionRecord
from attnviz.models.source import Rotates

POSITION_TOKENS = 256  # position_vs_content looks at the first this many tokens, so its cost is bounded


@dataclass(frozen=True)
class RopeFrequencies:
    """The angular frequency of each dimension pair and where it came from.

    inv_freq: (head_dim / 2,) radians per token, or None when the model has no RoPE.
    source: a sentence for a caption ("the model's rotary embedding", "Llama's default with base 10000", ...).
    """

    inv_freq: Tensor | None
    source: Text

    @property
    def rope(self) -> bool:
        return self.inv_freq is not None


@dataclass(frozen=True)
class LogitParts:
    """One logit and its exact parts.

    per_dim: (head_dim,) q[d] k[d] scale; per_pair: (head_dim / 2,) per_dim[i] + per_dim[i + head_dim/2].
    logit: q·k·scale before any soft cap (both part vectors sum to it); capped_logit: what the
    softmax saw (equal to logit when softcap is None). inv_freq: (head_dim / 2,) or None (no RoPE).
    """

    per_dim: Tensor
    per_pair: Tensor
    logit: float
    scale: float
    softcap: float | None = None
    capped_logit: float = math.nan
    inv_freq: Tensor | None = None

    @property
    def head_dim(self) -> int:
        return self.per_dim.shape[0]


def rope_frequencies(source: object, head_dim: int) -> RopeFrequencies:
    """The RoPE frequencies a model source uses: (head_dim / 2,), or None for a model without RoPE.

    Asked of the source when it can tell (:class:`~attnviz.models.source.Rotates`): its rotary
    embedding's own frequencies (exact, scaling included), or Llama's default ``1 / theta^(2i / head_dim)``
    from its ``rope_theta``; a source that cannot tell, or says none, has no RoPE.
    """
    found = source.rope_frequencies(head_dim) if isinstance(source, Rotates) else None
    if found is None:
        return RopeFrequencies(None, msg("logit_parts_lib.rope_none"))
    if found.theta is None:
        return RopeFrequencies(found.inv_freq, msg("logit_parts_lib.rope_own"))
    return RopeFrequencies(found.inv_freq, msg("logit_parts_lib.rope_default", theta=found.theta))


def _q_k(record: AttentionRecord, layer: int, head: int) -> tuple[Tensor, Tensor]:
    """The kept q (q_len, head_dim) of query head ``head`` and k (k_len, head_dim) of the K head it reads."""
    capture = record.layers[layer]
    if capture.q is None or capture.k is None:
        raise ValueError(msg("logit_parts_lib.no_qk"))
    n_head, n_kv_head = capture.q.shape[0], capture.k.shape[0]
    if not 0 <= head < n_head:
        raise ValueError(msg("logit_parts_lib.head_range", head=head, layer=layer, n_head=n_head))
    return capture.q[head], capture.k[head // (n_head // n_kv_head)]  # GQA: n_head // n_kv_head query heads per K head


def pair_parts(per_dim: Tensor) -> Tensor:
    """(..., head_dim) -> (..., head_dim / 2): dimension i plus dimension i + head_dim/2, the pairs RoPE rotates together."""
    head_dim = per_dim.shape[-1]
    if head_dim % 2:
        raise ValueError(msg("logit_parts_lib.odd_head_dim", head_dim=head_dim))
    first, second = per_dim.split(head_dim // 2, dim=-1)  # (..., head_dim / 2) each
    return first + second


def logit_parts(
    record: AttentionRecord, layer: int, head: int, query: int, key: int, inv_freq: Tensor | None = None
) -> LogitParts:
    """Split the logit of ``query`` on ``key`` in one head into per-dimension and per-pair parts."""
    q, k = _q_k(record, layer, head)  # (q_len, head_dim), (k_len, head_dim)
    if not 0 <= query < q.shape[0] or not 0 <= key < k.shape[0]:
        raise ValueError(
            msg("logit_parts_lib.query_key_range", query=query, key=key, n_query=q.shape[0], n_key=k.shape[0])
        )
    capture = record.layers[layer]
    per_dim = q[query].double() * k[key].double() * capture.scale  # (head_dim,)
    logit = float(per_dim.sum())
    capped = logit if capture.softcap is None else capture.softcap * math.tanh(logit / capture.softcap)
    if inv_freq is not None and inv_freq.shape[0] * 2 != per_dim.shape[0]:
        raise ValueError(msg("logit_parts_lib.inv_freq", n_freq=inv_freq.shape[0], head_dim=per_dim.shape[0]))
    return LogitParts(
        per_dim.float(), pair_parts(per_dim).float(), logit, capture.scale, capture.softcap, capped, inv_freq
    )


def _bins(parts: LogitParts, n_bins: int) -> list[np.ndarray]:
    """Pair indices in n_bins groups, highest frequency first (pair order when there is no RoPE)."""
    n_pair = parts.per_pair.shape[0]
    if n_bins < 1:
        raise ValueError(msg("logit_parts_lib.n_bins", n_bins=n_bins))
    order = np.arange(n_pair) if parts.inv_freq is None else np.argsort(-parts.inv_freq.numpy(), kind="stable")
    return [b for b in np.array_split(order, min(n_bins, n_pair)) if len(b)]


def band_summary(parts: LogitParts, n_bins: int = 8) -> pd.DataFrame:
    """The pair parts summed in ``n_bins`` bands, highest frequency first; the contributions sum to the logit.

    Columns: band (a label), pairs (the pair indices i, each pairing dims i and i + head_dim/2),
    freq_range (radians per token and wavelength in tokens, "" without RoPE), contribution.
    """
    rows = []
    per_pair = parts.per_pair.double().numpy()
    for n, pairs in enumerate(_bins(parts, n_bins)):
        span = f"{pairs.min()}–{pairs.max()}" if len(pairs) > 1 else f"{pairs[0]}"
        if parts.inv_freq is None:
            label, freq = msg("logit_parts_lib.pairs", span=span), ""
        else:
            hi, lo = float(parts.inv_freq[pairs].max()), float(parts.inv_freq[pairs].min())
            label = msg("logit_parts_lib.band", n=n + 1, span=span)
            freq = msg("logit_parts_lib.freq", hi=hi, lo=lo, long=2 * math.pi / hi, short=2 * math.pi / lo)
        rows.append({"band": label, "pairs": pairs.tolist(), "freq_range": freq, "contribution": per_pair[pairs].sum()})
    return pd.DataFrame(rows, columns=["band", "pairs", "freq_range", "contribution"])


def top_parts(parts: LogitParts, n: int = 3) -> pd.DataFrame:
    """The ``n`` dimensions with the largest |part|: columns dim, contribution, share (of Σ|parts|)."""
    values = parts.per_dim.double()
    top = values.abs().argsort(descending=True)[:n]
    total = float(values.abs().sum()) or 1.0
    return pd.DataFrame(
        {"dim": top.tolist(), "contribution": values[top].tolist(), "share": (values[top].abs() / total).tolist()}
    )


def position_vs_content(
    record: AttentionRecord,
    layer: int,
    head: int,
    inv_freq: Tensor,
    n_bins: int = 8,
    high_bins: int = 2,
    max_tokens: int = POSITION_TOKENS,
) -> float:
    """The share of the head's across-key logit variance that the highest-frequency bands carry.

    Over the first ``max_tokens`` tokens and every (query, key) pair the mask lets the query see
    (pad queries left out), each logit L is split into H, the pairs in the ``high_bins`` highest of
    ``n_bins`` frequency bands, and R, the rest (L = H + R, before any soft cap). Softmax ignores a
    constant added to a row, so only how L varies across the keys of one query matters: with every
    quantity centred within its row, the share is ``Σ H·L / Σ L²`` = (Var H + Cov(H, R)) / Var L,
    the part of L's variance that H accounts for (the shares of H and R add up to 1).

    Near 1: the head picks keys by the fast-turning pairs, which depend on relative position (a
    previous-token head); near 0: by the slow pairs, which barely turn over a text and so act on
    content. It can leave [0, 1] when H and R cancel. It says where the variation lives, not why:
    fast pairs may carry content too. NaN when no query sees two keys.
    """
    q, k = _q_k(record, layer, head)
    n_tok = min(max_tokens, record.q_len, record.k_len)
    if inv_freq.shape[0] * 2 != q.shape[-1]:
        raise ValueError(msg("logit_parts_lib.inv_freq", n_freq=inv_freq.shape[0], head_dim=q.shape[-1]))
    q, k = q[:n_tok].double(), k[:n_tok].double()  # (T, head_dim) each
    visible = record.mask(layer, (0, n_tok), (0, n_tok))  # (T, T), True where a real query sees the key
    order = np.argsort(-inv_freq.numpy(), kind="stable")
    high = torch.as_tensor(np.concatenate(np.array_split(order, min(n_bins, len(order)))[:high_bins]))
    dims = torch.cat([high, high + q.shape[-1] // 2])  # the pairs' two dimensions each
    scale = record.layers[layer].scale
    logits = q @ k.T * scale  # (T, T)
    fast = q[:, dims] @ k[:, dims].T * scale  # (T, T)

    def centred(x: Tensor) -> Tensor:
        x = x.masked_fill(~visible, 0.0)
        mean = x.sum(dim=1, keepdim=True) / visible.sum(dim=1, keepdim=True).clamp_min(1)  # (T, 1)
        return (x - mean).masked_fill(~visible, 0.0)

    logits, fast = centred(logits), centred(fast)
    total = float((logits * logits).sum())
    return float((fast * logits).sum()) / total if total > 0 else math.nan


def describe_parts(parts: LogitParts, bands: pd.DataFrame, n_top: int = 3) -> Message:
    """One sentence (Markdown, no user text) on which band and which dimensions carry most of the logit."""
    band_abs = bands["contribution"].abs()
    best = int(band_abs.idxmax())
    band_share = float(band_abs[best] / band_abs.sum()) if band_abs.sum() > 0 else 0.0
    top = top_parts(parts, n_top)
    dims = ", ".join(f"d{d} ({v:+.3f})" for d, v in zip(top["dim"], top["contribution"], strict=True))
    unit = msg("logit_parts_lib.unit_band") if parts.inv_freq is not None else msg("logit_parts_lib.unit_pairs")
    where = concat(" (", bands["freq_range"][best], ")") if parts.inv_freq is not None else ""
    return msg(
        "logit_parts_lib.describe",
        logit=parts.logit,
        unit=unit,
        band=bands["band"][best],
        where=where,
        contribution=float(bands["contribution"][best]),
        band_share=band_share,
        n_top=len(top),
        dims=dims,
        top_share=float(top["share"].sum()),
        head_dim=parts.head_dim,
    )


__all__ = [
    "LogitParts",
    "RopeFrequencies",
    "band_summary",
    "describe_parts",
    "logit_parts",
    "pair_parts",
    "position_vs_content",
    "rope_frequencies",
    "top_parts",
]

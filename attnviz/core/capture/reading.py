"""Reading a capture back: any head's scores, or any window of its weights, at full resolution on demand.

The weights are recomputed from the kept q, k and log-sum-exps (``exp(q·k·scale - lse)``), or read from the full
weights a capture of the eager route kept; a window is bounded (:data:`WINDOW_CELLS` cells a head).
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnviz.core.capture.kernel import scores_into
from attnviz.core.capture.layer import LayerCapture
from attnviz.i18n.message import msg

WINDOW_CELLS = 512 * 512  # the largest full-resolution window produced on demand, per head


def _scores(q: Tensor, k: Tensor, scale: float, softcap: float | None) -> Tensor:
    """q (n_head, C, hd) x k (n_kv_head, W, hd) -> scores (n_head, C, W) in float32, as the inspectable path has them."""
    buffer = torch.empty(q.shape[0] * q.shape[1] * k.shape[1], device=q.device)
    return scores_into(buffer, q, k.float().transpose(-2, -1), scale, softcap)


def head_scores(capture: LayerCapture, head: int, rows: tuple[int, int], cols: tuple[int, int]) -> Tensor:
    """One head's scores q·k·scale (soft-capped where the model caps), before any mask: (r1 - r0, c1 - c0)."""
    if capture.q is None or capture.k is None:
        raise ValueError("this capture did not keep q and k; run it with keep_qk=True")
    (r0, r1), (c0, c1) = rows, cols
    n_rep = capture.q.shape[0] // capture.k.shape[0]
    q = capture.q[head : head + 1, r0:r1]  # (1, R, hd)
    k = capture.k[head // n_rep : head // n_rep + 1, c0:c1]  # (1, C, hd): the K head this query head reads (GQA)
    return _scores(q, k, capture.scale, capture.softcap)[0]  # (R, C)


def weights_window(
    capture: LayerCapture,
    head: int | None,
    rows: tuple[int, int],
    cols: tuple[int, int],
    limit: int = WINDOW_CELLS,
    device: torch.device | str | None = None,
) -> Tensor:
    """Weights for query rows r0..r1-1 and keys c0..c1-1 at full resolution, from the kept q, k and log-sum-exps.

    w = exp(q·k·scale - lse), 0 where the mask hides the key. ``head`` None gives
    every head: (n_head, r1 - r0, c1 - c0); a head index gives (r1 - r0, c1 - c0).
    ValueError beyond ``limit`` cells per head. ``device``: where the window is
    computed and returned (the model's, for a lab that goes on there); by default
    where the capture keeps q and k, the CPU.
    """
    (r0, r1), (c0, c1) = rows, cols
    if (r1 - r0) * (c1 - c0) > limit:
        raise ValueError(msg("bounds.window_too_large", rows=r1 - r0, cols=c1 - c0, limit=limit))
    heads = slice(None) if head is None else slice(head, head + 1)
    if capture.weights is not None:  # a capture of full weights (the eager route): read them
        window = capture.weights[heads, r0:r1, c0:c1]
        window = window if device is None else window.to(device)
        window = window.masked_fill(~capture.keys.block(r0, r1, c0, c1, device=window.device), 0.0)
        return window if head is None else window[0]
    if capture.q is None or capture.k is None:
        raise ValueError("this capture did not keep q and k; run it with keep_qk=True")
    q = capture.q[heads, r0:r1]  # (h, R, hd)
    n_rep = capture.q.shape[0] // capture.k.shape[0]
    k = capture.k[:, c0:c1] if head is None else capture.k[head // n_rep : head // n_rep + 1, c0:c1]  # (h_kv, C, hd)
    lse = capture.rows["lse"][heads, r0:r1, None]  # (h, R, 1)
    if device is not None:  # only the window's rows and keys travel
        q, k, lse = q.to(device), k.to(device), lse.to(device)
    scores = _scores(q, k, capture.scale, capture.softcap)  # (h, R, C)
    weights = torch.exp(scores - lse.masked_fill(torch.isneginf(lse), 0.0))
    keep = capture.keys.block(r0, r1, c0, c1, device=q.device) & ~torch.isneginf(lse)  # (h, R, C)
    weights = weights.masked_fill(~keep, 0.0)
    return weights if head is None else weights[0]

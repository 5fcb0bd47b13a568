"""Computing a layer's capture: the attention of one sequence, a chunk of query rows at a time, reduced as it goes.

:func:`capture_attention` computes the weights from q and k and the output from v, as the model's eager attention
would; :func:`capture_weights` reads the full weights a model's own eager code returned. Both send every chunk
through the same reductions (per-row statistics, distances, pooled maps) and return a
:class:`~attnviz.core.capture.layer.LayerCapture`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor

from attnviz.core.attention import group_size, weighted_values
from attnviz.core.capture.layer import ROW_STATS, SINK_STAT, LayerCapture, pooled_counts
from attnviz.core.masks import KeyRanges, key_block
from attnviz.core.value_norms import LOW_NORM_STAT, picked_columns, small_columns, small_keys, value_norms

CHUNK_ELEMENTS = 2**23  # scores held at once on a CPU: n_head x chunk rows x keys (32 MB in float32)
VALUE_COLUMNS = 8  # the values a chunk's weights multiply are padded with zeros to a multiple of this many columns
CPU_CHUNK_ROWS = 128  # ... and at most this many rows: past ~100 rows a chunk no longer gets faster on a CPU
DEVICE_CHUNK_ELEMENTS = 2**26  # on an accelerator, fewer and larger chunks keep kernel launches few (256 MB)


def scores_into(buffer: Tensor, q: Tensor, k_t: Tensor, scale: float, softcap: float | None) -> Tensor:
    """q·k·scale (soft-capped where the model caps) written into ``buffer`` (flat, float32, at least n_head·C·W):
    q (n_head, C, hd) x k_t (n_kv_head, hd, W), k already transposed -> (n_head, C, W), a view of ``buffer``.

    The same matmul and scaling as :func:`attnviz.core.attention.attention_scores`, without allocating a
    chunk's scores anew: fresh pages for every chunk cost as much as the exp.
    """
    n_head, chunk, head_dim = q.shape
    n_kv_head, width = k_t.shape[0], k_t.shape[-1]
    n_rep = group_size(n_head, n_kv_head)
    grouped = buffer[: n_head * chunk * width].view(n_kv_head, n_rep * chunk, width)
    torch.matmul(q.float().reshape(n_kv_head, n_rep * chunk, head_dim), k_t, out=grouped).mul_(scale)
    scores = grouped.view(n_head, chunk, width)  # (n_head, C, W)
    if softcap is not None:  # Gemma-2 style logit soft-capping, applied where the model applies it
        scores.div_(softcap).tanh_().mul_(softcap)
    return scores


def _masked_parts(keys: KeyRanges, r0: int, r1: int, a0: int, a1: int) -> list[tuple[int, int]]:
    """Column ranges (relative to a0) of the window a0..a1-1 that may hold masked cells for rows r0..r1-1.

    Between the largest ``lo`` and the smallest ``hi`` every row sees every key,
    so only the columns outside that band need the mask: for a causal chunk,
    just the chunk's own diagonal block.
    """
    lo, hi = keys.lo[r0:r1], keys.hi[r0:r1]
    live = hi > lo
    if not bool(live.all()):
        return [(0, a1 - a0)]
    inner_lo, inner_hi = int(lo.max()), int(hi.min())
    if inner_lo >= inner_hi:
        return [(0, a1 - a0)]
    parts = [(0, inner_lo - a0), (inner_hi - a0, a1 - a0)]
    return [(s, e) for s, e in parts if e > s]


def _diagonals(q_pos: Tensor) -> list[tuple[str, Tensor]]:
    """The key each single-weight statistic reads: the query itself, the previous token, the first token."""
    return [("self_weight", q_pos), ("prev_token_weight", q_pos - 1), ("first_token_weight", torch.zeros_like(q_pos))]


def _fill_dead_rows(rows: dict[str, Tensor], r0: int, r1: int, q_pos: Tensor) -> None:
    """Statistics of rows that see no key: weight 0 everywhere (NaN where the key does not exist)."""
    rows["lse"][:, r0:r1] = -math.inf
    for name in ("entropy", "max_weight", "mean_distance"):
        rows[name][:, r0:r1] = 0.0
    for name, key in _diagonals(q_pos):
        rows[name][:, r0:r1] = torch.where(key >= 0, 0.0, math.nan)
    if SINK_STAT in rows:  # a learned sink takes the whole row
        rows[SINK_STAT][:, r0:r1] = 1.0
    if LOW_NORM_STAT in rows:
        rows[LOW_NORM_STAT][:, r0:r1] = 0.0


def _pool_keys(x: Tensor, b: int, reduce: str) -> Tensor:
    """Max or sum (``reduce``) over each run of ``b`` keys: (h, R, W) -> (h, R, ceil(W / b)); the last run may be short."""
    full = x.shape[-1] // b * b
    runs = x[..., :full].unflatten(-1, (full // b, b))  # (h, R, W // b, b), a view
    parts = [runs.amax(dim=-1) if reduce == "max" else runs.sum(dim=-1)]
    if full < x.shape[-1]:
        tail = x[..., full:]
        parts.append(tail.amax(dim=-1, keepdim=True) if reduce == "max" else tail.sum(dim=-1, keepdim=True))
    return torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]


def _row_bins(x: Tensor, r0: int, b: int) -> Tensor:
    """Rows r0.. of (h, C, W) grouped into their bins of ``b``: (h, n_bins, b, W); rows outside the chunk weigh 0.

    A chunk that starts and ends on bin edges is a view, with no copy.
    """
    top, bottom = r0 % b, -(r0 + x.shape[1]) % b
    padded = F.pad(x, (0, 0, top, bottom)) if top or bottom else x
    return padded.view(x.shape[0], padded.shape[1] // b, b, x.shape[-1])


def _pool_rows(w: Tensor, r0: int, b: int, reduce: str) -> Tensor:
    """Max or sum (``reduce``) over each bin of ``b`` rows: (h, C, W) -> (h, n_bins, W).

    Rows first, then keys: across rows the reduction runs along the contiguous
    key axis, vectorised, and leaves b times less for the short runs of keys.
    """
    bins = _row_bins(w, r0, b)  # (h, n_bins, b, W)
    return bins.amax(dim=2) if reduce == "max" else bins.sum(dim=2)


def _near_band(first: int, last: int, a0: int, width: int) -> tuple[int, int]:
    """Columns (relative to a0) of the keys between a chunk's first and last query position: weighted cell by cell."""
    return min(max(first - a0, 0), width), min(max(last + 1 - a0, 0), width)


def _far_columns(first: int, last: int, a0: int, width: int, device) -> Tensor:
    """(W, 4): for the keys before the near band, 1 and first - j; for those after it, 1 and j - last; else 0.

    ``first`` and ``last``: the chunk's first and last absolute query positions, as Python ints (never read back
    from the device). Weights times these columns give Σw and Σ w·(first - j) before the band and
    the mirror image after it: terms that are never negative, so nothing large cancels.
    """
    near_lo, near_hi = _near_band(first, last, a0, width)
    k_pos = torch.arange(a0, a0 + width, device=device, dtype=torch.float32)  # (W,)
    cols = torch.zeros(width, 4, device=device)
    cols[:near_lo, 0] = 1.0
    cols[:near_lo, 1] = first - k_pos[:near_lo]
    cols[near_hi:, 2] = 1.0
    cols[near_hi:, 3] = k_pos[near_hi:] - last
    return cols


def _distance_from(w: Tensor, q_pos: Tensor, first: int, last: int, a0: int, far: Tensor) -> Tensor:
    """Σ_j w·|i - j| per row from ``far`` (n_head, C, 4), the weights times :func:`_far_columns`, and the near band."""
    near_lo, near_hi = _near_band(first, last, a0, w.shape[-1])
    qf = q_pos.float()
    total = (qf - first) * far[..., 0] + far[..., 1] + (last - qf) * far[..., 2] + far[..., 3]
    if near_hi > near_lo:
        k_pos = torch.arange(a0 + near_lo, a0 + near_hi, device=w.device, dtype=torch.float32)
        distance = (qf[:, None] - k_pos[None, :]).abs()  # (C, near)
        total = total + (w[..., near_lo:near_hi] * distance).sum(dim=-1)
    return total


def _mean_distance(w: Tensor, q_pos: Tensor, first: int, last: int, a0: int) -> Tensor:
    """Σ_j w·|i - j| for each row: w (n_head, C, W) over keys a0.., q_pos (C,) from ``first`` to ``last`` -> (n_head, C).

    Keys before the chunk's first position d0 are summed as (i - d0)·Σw + Σ w·(d0 - j),
    and keys after its last position as the mirror image: one matmul of
    non-negative terms, so nothing large cancels. Only the C x C block around
    the diagonal is weighted cell by cell. (i·Σw - Σ w·j in one matvec loses a
    previous-token head's distance of 1 to float32 cancellation at long inputs.)
    """
    far = w @ _far_columns(first, last, a0, w.shape[-1], w.device)  # (n_head, C, 4)
    return _distance_from(w, q_pos, first, last, a0, far)


ROWS_FIRST_BIN = 16  # bins of at most this many tokens pool rows first (faster on a CPU), wider ones keys first


def _pool(w: Tensor, r0: int, b: int, reduce: str) -> Tensor:
    """Max or sum of the weights w (h, C, W) of rows r0.. over each b x b cell: (h, n_bins, ceil(W / b)).

    Reducing a run of a few keys is slow (short innermost loops), so narrow bins
    pool rows first, along the contiguous key axis; wide bins pool keys first,
    which leaves b times less for the rows.
    """
    if b <= ROWS_FIRST_BIN:
        return _pool_keys(_pool_rows(w, r0, b, reduce), b, reduce)
    keys = _pool_keys(w, b, reduce)  # (h, C, Wb)
    return _pool_rows(keys, r0, b, reduce)


class _Reducer:
    """The reductions every chunk of rows goes through, whichever way its weights were computed.

    Holds the per-row statistics and the pooled maps of one layer while they fill, on the device of the work.
    Nothing in a chunk is read back to the host: positions are Python ints, the mask is built on the device
    from its rows' integers (copied there once a layer), and results cross to the host once, in :meth:`capture`.
    """

    def __init__(
        self,
        n_head: int,
        q_len: int,
        k_len: int,
        keys: KeyRanges,
        b: int,
        device,
        sinks: bool,
        norms: bool = False,
        pooled: bool = True,
    ) -> None:
        self.n_head, self.keys, self.b, self.offset = n_head, keys, b, k_len - q_len  # query i is at offset + i
        names = (*ROW_STATS, *((SINK_STAT,) if sinks else ()), *((LOW_NORM_STAT,) if norms else ()))
        self.rows = {name: torch.full((n_head, q_len), math.nan, device=device) for name in names}
        self.pooled = pooled  # False: a statistics pass, its maps left empty (n_head, 0, 0)
        n_q, n_k = (math.ceil(q_len / b), math.ceil(k_len / b)) if pooled else (0, 0)
        self.pooled_max = torch.zeros(n_head, n_q, n_k, device=device)
        self.pooled_sum = torch.zeros(n_head, n_q, n_k, device=device)
        self.mean_max = torch.zeros(n_q, n_k, device=device)
        self.lo, self.hi = keys.lo.to(device), keys.hi.to(device)  # (q_len,) each: the mask's rows, on the device

    def block(self, r0: int, r1: int, c0: int, c1: int) -> Tensor:
        """The mask of rows r0..r1-1 over keys c0..c1-1, bool (r1 - r0, c1 - c0), built on the device."""
        return key_block(self.lo[r0:r1], self.hi[r0:r1], c0, c1)

    def span(self, r0: int, r1: int) -> tuple[int, int]:
        """The absolute positions of query rows r0 and r1 - 1, as Python ints."""
        return r0 + self.offset, r1 - 1 + self.offset

    def chunks(self, chunk: int, device) -> Iterator[tuple[int, int, Tensor, int, int]]:
        """(r0, r1, absolute query positions, a0, a1) for each chunk of rows that sees a key; dead chunks filled."""
        q_len, b = self.keys.q_len, self.b
        for r0 in range(0, q_len, chunk):
            r1 = min(q_len, r0 + chunk)
            q_pos = torch.arange(r0, r1, device=device) + self.offset  # (C,) absolute positions
            c0, c1 = self.keys.key_span(r0, r1)
            if c1 <= c0:  # every row of the chunk is fully masked: zero weights, zero output
                _fill_dead_rows(self.rows, r0, r1, q_pos)
                continue
            yield r0, r1, q_pos, c0 // b * b, min(self.keys.k_len, -(-c1 // b) * b)  # key window, aligned to bins

    def add(self, w: Tensor, r0: int, r1: int, q_pos: Tensor, a0: int, mean_distance: Tensor | None = None) -> None:
        """Weights w (n_head, C, W) of rows r0..r1-1 over keys a0..: the single-weight statistics, distances, maps.

        ``mean_distance`` (n_head, C): the rows' distances when the caller already has them.
        """
        n_head, b, rows = self.n_head, self.b, self.rows
        for name, key in _diagonals(q_pos):
            col = key - a0
            inside = (col >= 0) & (col < w.shape[-1])
            picked = w.gather(-1, col.clamp(0, w.shape[-1] - 1).expand(n_head, -1)[..., None])[..., 0]
            value = torch.where(inside, picked, 0.0)  # a key outside the window is masked: weight 0
            rows[name][:, r0:r1] = torch.where(key >= 0, value, math.nan)
        if mean_distance is None:
            mean_distance = _mean_distance(w, q_pos, *self.span(r0, r1), a0)
        rows["mean_distance"][:, r0:r1] = mean_distance
        if not self.pooled:
            return
        # pooled maps: rows into bins first, then each bin's keys; merge into bins an earlier chunk may have started
        pooled_max = _pool(w, r0, b, "max")  # (n_head, n_bins, Wb)
        pooled_sum = _pool(w, r0, b, "sum")
        mean_max = _pool(w.mean(dim=0, keepdim=True), r0, b, "max")  # (1, n_bins, Wb)
        rb = slice(r0 // b, r0 // b + pooled_max.shape[1])
        cb = slice(a0 // b, a0 // b + pooled_max.shape[-1])
        self.pooled_max[:, rb, cb] = torch.maximum(self.pooled_max[:, rb, cb], pooled_max)
        self.pooled_sum[:, rb, cb] += pooled_sum
        self.mean_max[rb, cb] = torch.maximum(self.mean_max[rb, cb], mean_max[0])

    def capture(self, scale: float, softcap: float | None, **kept: Tensor | None) -> LayerCapture:
        device = self.pooled_max.device
        counts = pooled_counts(self.keys, self.b).to(device) if self.pooled else torch.zeros(0, 0, device=device)
        empty = counts == 0
        return LayerCapture(
            rows={name: value.cpu() for name, value in self.rows.items()},
            pooled_max=self.pooled_max.masked_fill(empty, math.nan).cpu(),
            pooled_mean=(self.pooled_sum / counts.clamp_min(1)).masked_fill(empty, math.nan).cpu(),
            mean_pooled_max=self.mean_max.masked_fill(empty, math.nan).cpu(),
            keys=self.keys,
            bin_size=self.b,
            scale=float(scale),
            softcap=softcap,
            **{name: None if t is None else t.detach().float().cpu() for name, t in kept.items()},
        )


def _small(norms: Tensor, keys: KeyRanges, seen_keys_only: bool) -> Tensor:
    """:func:`~attnviz.core.value_norms.small_keys` of every key, or (``seen_keys_only``) against the median of the
    keys some query sees, the others never small: (n_head, k_len) 0/1."""
    if not seen_keys_only:
        return small_keys(norms)
    c0, c1 = keys.key_span(0, keys.q_len)
    small = torch.zeros_like(norms)
    small[:, c0:c1] = small_keys(norms[:, c0:c1])
    return small


def _chunk_rows(keys: KeyRanges, n_head: int, b: int, device) -> int:
    """Rows per chunk, so that a chunk's scores stay within the device's budget; whole bins when they fit."""
    c_first, c_last = keys.key_span(0, keys.q_len)
    budget = CHUNK_ELEMENTS if device.type == "cpu" else DEVICE_CHUNK_ELEMENTS
    chunk = max(1, budget // max(1, n_head * (c_last - c_first)))
    if device.type == "cpu":
        chunk = min(chunk, max(CPU_CHUNK_ROWS, b))
    return chunk // b * b if chunk >= b else chunk  # whole bins when they fit: no bin to merge


@torch.no_grad()  # a capture reads a pass; its output carries no gradient (the chunks write into reused buffers)
def capture_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    keys: KeyRanges,
    *,
    scale: float,
    bin_size: int,
    softcap: float | None = None,
    keep_qk: bool = True,
    sinks: Tensor | None = None,
    out_factors: Tensor | None = None,
    seen_keys_only: bool = False,
    pooled: bool = True,
) -> tuple[Tensor, LayerCapture]:
    """One layer's attention for one sequence, chunk by chunk: the output and its capture.

    q: (n_head, q_len, head_dim); k: (n_kv_head, k_len, head_dim); v: (n_kv_head,
    k_len, v_dim), after any rotation; ``keys`` is the mask the model applies
    (queries are the last q_len of the k_len positions). Returns the output
    (n_head, q_len, v_dim) in q's dtype, equal to softmax(q·kᵀ·scale + mask)·v
    with fully masked rows as zeros, and the :class:`LayerCapture`. Work stays
    on q's device; only reduced results (and q and k) move to the CPU.

    ``sinks`` (n_head,): learned sink logits, one more term of every row's
    softmax denominator with no value (gpt-oss): weights then sum to 1 minus
    ``sink_weight``, and a row that sees no key gives all of it to the sink.

    ``out_factors`` (n_head, v_dim, r): the layer's output projection as
    :func:`attnviz.core.value_norms.projection_factors` gives it; the capture
    then keeps every key's value norm per head and the row statistic ``low_norm_weight``. ``seen_keys_only``:
    a key is small against the median of the keys some query sees (a padded batch's statistics: pads never
    count), not of all of them. ``pooled`` False: no pooled maps (a statistics pass reads none; they are left
    empty, (n_head, 0, 0)); every row statistic is the same.
    """
    n_head, q_len, _ = q.shape
    n_kv_head, k_len, _ = k.shape
    group_size(n_head, n_kv_head)
    if keys.q_len != q_len or keys.k_len != k_len:
        raise ValueError(f"mask is {keys.q_len} x {keys.k_len} but attention is {q_len} x {k_len}")
    if sinks is not None and sinks.shape != (n_head,):
        raise ValueError(f"sinks must hold one logit per head ({n_head}), not shape {tuple(sinks.shape)}")
    device = q.device
    reducer = _Reducer(
        n_head, q_len, k_len, keys, bin_size, device, sinks is not None, out_factors is not None, pooled=pooled
    )
    rows = reducer.rows
    v_dim = v.shape[-1]
    norms = None if out_factors is None else value_norms(v, out_factors.to(device))  # (n_head, k_len)
    small = None if norms is None else _small(norms, keys, seen_keys_only)  # (n_head, k_len) 0/1
    out = torch.zeros(n_head, q_len, v_dim, device=device, dtype=torch.float32)
    n_rep = 0 if small is None else n_head // n_kv_head  # then n_rep more columns: each head's small keys
    width = v_dim + 4 + n_rep
    # v, then four columns a chunk fills, the small keys' columns, and zeros up to a multiple of 8 columns: a
    # matmul this wide runs 1.3x faster than 71 columns wide (SmolLM2's 64 + 4 + 3) on a CPU, and a zero column adds
    # nothing to the others
    values = torch.zeros(n_kv_head, k_len, -(-width // VALUE_COLUMNS) * VALUE_COLUMNS, device=device)
    values[..., :v_dim] = v.detach()
    if small is not None:
        values[..., v_dim + 4 : width] = small_columns(small, n_kv_head)  # (n_kv_head, k_len, n_rep)
    sink = None if sinks is None else sinks.detach().to(device, torch.float32).view(n_head, 1, 1)

    chunk = _chunk_rows(keys, n_head, bin_size, device)
    k_t = k.detach().float().transpose(-2, -1).contiguous()  # (n_kv_head, hd, k_len): each chunk's keys a view
    cells = n_head * min(chunk, q_len) * k_len
    scores_buffer, weights_buffer = torch.empty(cells, device=device), torch.empty(cells, device=device)
    for r0, r1, q_pos, a0, a1 in reducer.chunks(chunk, device):
        s = scores_into(scores_buffer, q[:, r0:r1], k_t[..., a0:a1], scale, softcap)  # (n_head, C, W)
        parts = _masked_parts(keys, r0, r1, a0, a1)
        keep = {(ps, pe): reducer.block(r0, r1, a0 + ps, a0 + pe) for ps, pe in parts}
        for (ps, pe), kp in keep.items():
            s[..., ps:pe].masked_fill_(~kp, -math.inf)
        row_max = s.amax(dim=-1, keepdim=True)  # (n_head, C, 1)
        m = row_max if sink is None else torch.maximum(row_max, sink)  # with a sink no row is dead
        dead = torch.isneginf(m)
        m = m.masked_fill(dead, 0.0)
        s.sub_(m)  # s - max: -inf where masked
        e = torch.exp(s, out=weights_buffer[: s.numel()].view(s.shape))  # (n_head, C, W) unnormalised weights
        for (ps, pe), kp in keep.items():
            s[..., ps:pe].masked_fill_(~kp, 0.0)  # so 0 * (s - m) stays 0 where masked
        z_keys = e.sum(dim=-1, keepdim=True)  # (n_head, C, 1)
        e_dot_s = s.mul_(e).sum(dim=-1)  # (n_head, C): Σ e·(s - m), for the entropy (s is not needed after)
        e_sink = None if sink is None else torch.exp(sink - m)  # (n_head, C, 1)
        z = z_keys if e_sink is None else z_keys + e_sink
        z_safe = torch.where(z > 0, z, torch.ones_like(z))
        w = e.div_(z_safe)  # (n_head, C, W) the weights; fully masked rows are 0
        z1, dead1 = z_safe[..., 0], dead[..., 0]

        rows["lse"][:, r0:r1] = torch.where(dead1, -math.inf, m[..., 0] + z1.log())
        # -Σ w·log w over the keys, with w = e / z and log w = (s - m) - log z
        rows["entropy"][:, r0:r1] = torch.where(dead1, 0.0, (z_keys[..., 0] * z1.log() - e_dot_s) / z1)
        top = torch.exp((row_max - m).masked_fill(torch.isneginf(row_max), -math.inf))[..., 0]  # 1 without sinks
        rows["max_weight"][:, r0:r1] = torch.where(dead1, 0.0, top / z1)
        if e_sink is not None:
            rows[SINK_STAT][:, r0:r1] = e_sink[..., 0] / z1
        # one matmul gives the output and the distances' far sums: v with the four columns of _far_columns
        first, last = reducer.span(r0, r1)
        values[:, a0:a1, v_dim : v_dim + 4] = _far_columns(first, last, a0, a1 - a0, device)
        both = weighted_values(w[None], values[None, :, a0:a1])[0]  # (n_head, C, width and the zero columns)
        out[:, r0:r1] = both[..., :v_dim]
        if small is not None:  # Σ_j w·[n_hj small], from the same matmul
            rows[LOW_NORM_STAT][:, r0:r1] = picked_columns(both[..., v_dim + 4 : width], n_kv_head)
        far = both[..., v_dim : v_dim + 4]
        reducer.add(w, r0, r1, q_pos, a0, mean_distance=_distance_from(w, q_pos, first, last, a0, far))

    kept = {"q": q if keep_qk else None, "k": k if keep_qk else None, "sinks": sinks, "value_norms": norms}
    capture = reducer.capture(scale, softcap, **kept)
    return out.to(q.dtype), capture


def capture_weights(
    weights: Tensor,
    keys: KeyRanges,
    *,
    bin_size: int,
    scale: float,
    sink_weight: Tensor | None = None,
) -> LayerCapture:
    """A layer's capture from the full weights a model's own eager attention returned: (n_head, q_len, k_len).

    The statistics and pooled maps are those :func:`capture_attention` keeps,
    read from the weights themselves; the weights are kept (windows come from
    them), q and k are not, and ``lse`` is NaN. ValueError when a weight falls
    on a key ``keys`` hides: the mask would misdescribe what the layer did.
    ``sink_weight`` (n_head, q_len): each row's share on learned sinks, if any.
    """
    n_head, q_len, k_len = weights.shape
    if keys.q_len != q_len or keys.k_len != k_len:
        raise ValueError(f"mask is {keys.q_len} x {keys.k_len} but the weights are {q_len} x {k_len}")
    weights = weights.detach().float()
    device = weights.device
    reducer = _Reducer(n_head, q_len, k_len, keys, bin_size, device, sink_weight is not None)
    rows = reducer.rows
    leak = torch.zeros((), dtype=torch.bool, device=device)  # read once, after the loop: no host sync per chunk
    for r0, r1, q_pos, a0, a1 in reducer.chunks(_chunk_rows(keys, n_head, bin_size, device), device):
        w = weights[:, r0:r1, a0:a1].clone()  # (n_head, C, W)
        hidden = ~reducer.block(r0, r1, a0, a1)  # (C, W)
        leak |= ((w != 0) & hidden).any()
        rows["entropy"][:, r0:r1] = -torch.xlogy(w, w).sum(dim=-1)
        rows["max_weight"][:, r0:r1] = w.amax(dim=-1)
        if sink_weight is not None:
            rows[SINK_STAT][:, r0:r1] = sink_weight[:, r0:r1].float()
        reducer.add(w, r0, r1, q_pos, a0)
    if bool(leak.cpu()):  # the layer's one read back before its results cross to the host
        raise ValueError("the layer put weight on a key its mask hides")
    for r0, r1 in _dead_runs(keys):
        rows["lse"][:, r0:r1] = -math.inf
    capture = reducer.capture(scale, None, weights=weights)
    capture.route = "eager"
    return capture


def _dead_runs(keys: KeyRanges) -> list[tuple[int, int]]:
    """Rows that see no key, as runs (r0, r1)."""
    dead = (keys.hi <= keys.lo).tolist()
    runs, start = [], None
    for i, d in enumerate([*dead, False]):
        if d and start is None:
            start = i
        elif not d and start is not None:
            runs.append((start, i))
            start = None
    return runs

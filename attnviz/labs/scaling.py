"""Why attention divides by √d_k, measured on a model's real q and k.

q·k is a sum of d_k products: for unit-variance components its variance is
d_k, so without the scale the scores grow with the head size, the softmax
saturates onto one key, and its gradient vanishes (the tutorial's "loss stuck"
and "attention collapses onto a few tokens"). Dividing by √d_k brings the
variance back to 1; dividing by √d_model instead (a classic bug) shrinks the
scores by √n_head too much and flattens the attention.

Everything here reads a record's q and k, exactly what entered each layer's
softmax (after RoPE), and recomputes the rows chunk by chunk under other
scales, so memory stays bounded like the capture's. A record keeps q and k on
the host; given the model's ``device``, each layer's q and k go there once and
only the rows' statistics come back, once a layer.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from attnviz import settings
from attnviz.core.attention import attention_scores, reduction_dtype
from attnviz.core.capture.kernel import CHUNK_ELEMENTS
from attnviz.core.masks import KeyRanges
from attnviz.core.progress import Progress, or_none
from attnviz.i18n.message import Message, msg
from attnviz.models.record import AttentionRecord

SCALE_KINDS = ("sqrt_dk", "none", "sqrt_dmodel")
SCALE_TITLES = {"sqrt_dk": "1/√d_k (correct)", "none": "no scale", "sqrt_dmodel": "1/√d_model (the bug)"}  # the CLI's
SATURATED = 0.9  # a row is saturated when its largest weight reaches this
VARIANCE_DIMS = (4, 8, 16, 32, 64, 128, 256, 512, 1024)
GRADIENT_MULTIPLES = tuple(float(m) for m in np.geomspace(1 / 16, 16, 25))  # of the correct scale
SLIDER_MULTIPLES = (0.0625, 0.125, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0, 8.0, 16.0, 32.0)
GRADIENT_ROWS = 512  # query rows the gradient argument averages over (evenly spaced)


def scale_titles() -> dict[str, Message]:
    """SCALE_TITLES as messages, for the figures and pages (SCALE_TITLES is the English the CLI prints)."""
    return {kind: msg(f"scaling_lib.title_{kind}") for kind in SCALE_KINDS}


def scale_factors(head_dim: int, d_model: int) -> dict[str, float]:
    """The three scales: 1/√d_k (correct), 1 (none) and 1/√d_model (the bug)."""
    return {"sqrt_dk": head_dim**-0.5, "none": 1.0, "sqrt_dmodel": d_model**-0.5}


def softmax_rows(scores: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-row entropy (nats), largest weight and the weights of (..., k) scores with -inf where masked.

    A row with no visible key gets entropy 0, max weight 0 and zero weights.
    """
    m = scores.amax(dim=-1, keepdim=True)
    dead = torch.isneginf(m)
    shifted = scores - m.masked_fill(dead, 0.0)  # (..., k): -inf where masked
    e = torch.exp(shifted)
    z = e.sum(dim=-1, keepdim=True)
    z_safe = torch.where(z > 0, z, torch.ones_like(z))
    w = e / z_safe
    e_dot = (e * shifted.masked_fill(torch.isneginf(shifted), 0.0)).sum(dim=-1)
    entropy = torch.where(dead[..., 0], 0.0, z_safe[..., 0].log() - e_dot / z_safe[..., 0])
    max_weight = torch.where(dead[..., 0], 0.0, 1.0 / z_safe[..., 0])
    return entropy, max_weight, w


@dataclass(eq=False)
class ScalingRows:
    """Per-row statistics of every head under each scale, and the raw score moments of every layer.

    entropy, max_weight: {kind: (n_layer, n_head, T)}; live: (n_layer, T), the rows
    with a choice (≥ 2 visible keys, not a pad); visible: (n_layer, T);
    score_mean, score_sq: (n_layer, n_head), the mean of q·k and of (q·k)² over visible cells.
    """

    factors: dict[str, float]
    head_dim: int
    d_model: int
    entropy: dict[str, Tensor]
    max_weight: dict[str, Tensor]
    live: Tensor
    visible: Tensor
    score_mean: Tensor
    score_sq: Tensor

    @property
    def nbytes(self) -> int:
        tensors = [*self.entropy.values(), *self.max_weight.values(), self.live, self.visible]
        return sum(x.numel() * x.element_size() for x in tensors)

    def table(self, threshold: float = SATURATED) -> pd.DataFrame:
        """One row per (layer, head): mean entropy, normalised entropy and saturated share under each scale."""
        live = self.live[:, None, :]  # (n_layer, 1, T)
        n_live = live.sum(dim=-1).clamp_min(1).float()  # (n_layer, 1)
        log_visible = self.visible.float().clamp_min(2).log()[:, None, :]
        n_layer, n_head = self.score_mean.shape
        frame = pd.DataFrame(
            {
                "layer": np.repeat(np.arange(n_layer), n_head),
                "head": np.tile(np.arange(n_head), n_layer),
            }
        )
        none_live = ~live.any(dim=-1).expand(n_layer, n_head)  # heads with no row to average
        for kind in self.factors:
            entropy = self.entropy[kind]
            columns = {
                "entropy": (entropy * live).sum(-1) / n_live,
                "entropy_norm": (entropy / log_visible * live).sum(-1) / n_live,
                "saturated_share": ((self.max_weight[kind] >= threshold) & live).sum(-1) / n_live,
            }
            for name, value in columns.items():
                frame[f"{name}_{kind}"] = value.masked_fill(none_live, math.nan).reshape(-1).numpy()
        return frame

    def layer_variance(self) -> pd.DataFrame:
        """Per layer: Var(q·k) averaged over heads, its ratio to d_k, and the variance after each scale."""
        variance = (self.score_sq - self.score_mean**2).mean(dim=1)  # (n_layer,)
        frame = pd.DataFrame({"layer": np.arange(len(variance)), "var_qk": variance.numpy()})
        frame["ratio_to_dk"] = frame["var_qk"] / self.head_dim
        for kind, factor in self.factors.items():
            frame[f"var_{kind}"] = frame["var_qk"] * factor**2
        return frame


def _scores_for_rows(q: Tensor, k: Tensor, keys: KeyRanges, r0: int, r1: int) -> Tensor:
    """Raw q·k (no scale) of rows r0..r1 over the keys they may see, -inf elsewhere: (n_head, C, W), on q's device.

    q (n_head, T, hd) and k (n_kv_head, k_len, hd): a layer's, on the device the work runs on.
    """
    c0, c1 = keys.key_span(r0, r1)
    raw = attention_scores(q[None, :, r0:r1], k[None, :, c0:c1], 1.0)[0]  # (n_head, C, W)
    keep = keys.block(r0, r1, c0, c1, device=q.device)  # (C, W)
    return raw.masked_fill(~keep, -math.inf)


def _device(device: torch.device | str | None) -> torch.device:
    """Where a lab's work runs: ``device`` (the model's), the CPU when None."""
    return torch.device("cpu" if device is None else device)


def tokens_within_budget(n_layer: int, n_head: int, requested: int) -> int:
    """How many tokens the scaling lab reads: ``requested``, at most SCALING_TOKENS and within SCALING_MAX_CELLS.

    The lab recomputes n_layer x n_head x T x T scores three times, so a model with many heads reads fewer tokens.
    """
    within = math.isqrt(settings.SCALING_MAX_CELLS // max(1, n_layer * n_head))
    return max(1, min(requested, settings.SCALING_TOKENS, within))


def scaling_rows(
    record: AttentionRecord,
    d_model: int,
    head_dim: int,
    progress: Progress | None = None,
    *,
    device: torch.device | str | None = None,
) -> ScalingRows:
    """Every head of every layer under the three scales, from the record's q and k, chunk by chunk
    (``progress``: a step a layer). ``device``: where the scores are recomputed (the model's; the CPU when None);
    each layer's statistics come back to the host once, and the score moments are summed in
    :func:`~attnviz.core.attention.reduction_dtype` there (float64 on the CPU)."""
    factors = scale_factors(head_dim, d_model)
    if record.layers[0].q is None:
        raise ValueError(msg("scaling_lib.no_qk"))
    device = _device(device)
    wide = reduction_dtype(device)
    n_layer, n_head, T = record.n_layer, record.n_head, record.q_len
    progress = or_none(progress)
    progress.stage("progress.layer", n_layer)
    entropy = {kind: torch.zeros(n_layer, n_head, T) for kind in factors}
    max_weight = {kind: torch.zeros(n_layer, n_head, T) for kind in factors}
    score_sum = torch.zeros(n_layer, n_head, dtype=torch.float64)
    score_sq = torch.zeros(n_layer, n_head, dtype=torch.float64)
    cells = torch.zeros(n_layer, dtype=torch.float64)
    chunk = max(1, CHUNK_ELEMENTS // max(1, n_head * max(1, record.k_len)))
    for layer, capture in enumerate(record.layers):
        if capture.softcap is not None:  # a soft-capped model's logits are capped after the scale: keep the cap
            raise ValueError(msg("scaling_lib.softcap"))
        q, k = capture.q.to(device), capture.k.to(device)  # (n_head, T, hd), (n_kv_head, k_len, hd)
        rows = {(stat, kind): torch.zeros(n_head, T, device=device) for stat in ("entropy", "max") for kind in factors}
        sums = torch.zeros(2, n_head, dtype=wide, device=device)  # Σ q·k and Σ (q·k)² over the visible cells
        n_cells = torch.zeros((), dtype=torch.long, device=device)
        for r0 in range(0, T, chunk):
            r1 = min(T, r0 + chunk)
            raw = _scores_for_rows(q, k, capture.keys, r0, r1)  # (n_head, C, W)
            visible = ~torch.isneginf(raw)
            finite = raw.masked_fill(~visible, 0.0).to(wide)
            sums[0] += finite.sum(dim=(1, 2))
            sums[1] += (finite * finite).sum(dim=(1, 2))
            n_cells += visible[0].sum()
            for kind, factor in factors.items():
                rows_entropy, rows_max, _ = softmax_rows(raw * factor)
                rows["entropy", kind][:, r0:r1] = rows_entropy
                rows["max", kind][:, r0:r1] = rows_max
        for kind in factors:  # the layer's results, to the host once
            entropy[kind][layer] = rows["entropy", kind].cpu()
            max_weight[kind][layer] = rows["max", kind].cpu()
        score_sum[layer], score_sq[layer] = sums.cpu().double()
        cells[layer] = n_cells.cpu()
        progress.step()
    live = record.live_rows()
    visible = torch.stack([record.keys(layer).visible() for layer in range(n_layer)])
    denominator = cells.clamp_min(1)[:, None]
    return ScalingRows(
        factors=factors,
        head_dim=head_dim,
        d_model=d_model,
        entropy=entropy,
        max_weight=max_weight,
        live=live,
        visible=visible,
        score_mean=(score_sum / denominator).float(),
        score_sq=(score_sq / denominator).float(),
    )


def head_under_scale(
    record: AttentionRecord,
    layer: int,
    head: int,
    factor: float,
    rows: tuple[int, int],
    cols: tuple[int, int],
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """One head's weights under another scale, rows x cols of them: (R, C) on the host. Full rows are normalised,
    then cut; computed on ``device`` (the model's; the CPU when None)."""
    capture, device = record.layers[layer], _device(device)
    r0, r1 = rows
    q = capture.q[None, head : head + 1, r0:r1].to(device)  # (1, 1, R, hd)
    raw = attention_scores(q, _kv_head(capture, head, device), 1.0)[0, 0]  # (R, k_len)
    raw = raw.masked_fill(~capture.keys.block(r0, r1, device=device), -math.inf)
    _, _, weights = softmax_rows(raw * factor)
    return weights[:, cols[0] : cols[1]].cpu()


def _kv_head(capture, head: int, device: torch.device) -> Tensor:
    """The K head a query head reads (GQA): (1, 1, k_len, head_dim), on ``device``."""
    n_rep = capture.q.shape[0] // capture.k.shape[0]
    return capture.k[None, head // n_rep : head // n_rep + 1].to(device)


def head_row_stats(
    record: AttentionRecord,
    layer: int,
    head: int,
    factor: float,
    threshold: float,
    *,
    device: torch.device | str | None = None,
) -> dict[str, float]:
    """Mean entropy, normalised entropy and saturated share of one head under one scale, the rows computed on
    ``device`` (the model's; the CPU when None) and averaged on the host."""
    capture, T, device = record.layers[layer], record.q_len, _device(device)
    live = record.live_rows()[layer]
    entropies, maxima = [], []
    chunk = max(1, CHUNK_ELEMENTS // max(1, record.k_len))
    q, k = capture.q[None, head : head + 1].to(device), _kv_head(capture, head, device)  # (1, 1, T, hd), (1, 1, S, hd)
    for r0 in range(0, T, chunk):
        r1 = min(T, r0 + chunk)
        raw = attention_scores(q[:, :, r0:r1], k, 1.0)[0, 0]  # (C, k_len)
        raw = raw.masked_fill(~capture.keys.block(r0, r1, device=device), -math.inf)
        entropy, max_weight, _ = softmax_rows(raw * factor)
        entropies.append(entropy)
        maxima.append(max_weight)
    entropy, max_weight = torch.cat(entropies).cpu(), torch.cat(maxima).cpu()
    n = max(1, int(live.sum()))
    log_visible = capture.keys.visible().float().clamp_min(2).log()
    return {
        "entropy": float(entropy[live].sum() / n),
        "entropy_norm": float((entropy / log_visible)[live].sum() / n),
        "saturated_share": float(((max_weight >= threshold) & live).sum() / n),
    }


def gradient_multiples(factors: dict[str, float]) -> list[float]:
    """GRADIENT_MULTIPLES widened to take in the three named scales, as multiples of the correct one."""
    named = [factor / factors["sqrt_dk"] for factor in factors.values()]
    low, high = min(GRADIENT_MULTIPLES[0], *named), max(GRADIENT_MULTIPLES[-1], *named)
    return sorted({*np.geomspace(low, high, len(GRADIENT_MULTIPLES)).tolist(), *named})


def random_variance(dims=VARIANCE_DIMS, samples: int = 20_000, seed: int = 0) -> pd.DataFrame:
    """Var(q·k) for random unit-variance q and k against d_k, unscaled and scaled by 1/√d_k."""
    return pd.DataFrame(list(_random_variance_rows(tuple(dims), samples, seed)))


@functools.lru_cache(maxsize=4)
def _random_variance_rows(dims: tuple[int, ...], samples: int, seed: int) -> tuple[dict, ...]:
    """:func:`random_variance`'s rows, computed once per process: the same numbers on every rerun of the page,
    which would otherwise draw a few hundred MB of random numbers (seconds) each time."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for d in dims:
        q = torch.randn(samples, d, generator=g, dtype=torch.float64)
        k = torch.randn(samples, d, generator=g, dtype=torch.float64)
        dots = (q * k).sum(dim=-1)  # (samples,)
        rows.append({"d_k": d, "var_unscaled": float(dots.var()), "var_scaled": float((dots / math.sqrt(d)).var())})
    return tuple(rows)


VANISHING = 0.01  # a row whose softmax Jacobian has a Frobenius norm below this passes (almost) no gradient


@dataclass(frozen=True)
class GradientCurve:
    """For one head, against multiples of the correct scale: how much gradient the softmax lets through.

    jacobian_norm: mean ||J||_F of the rows' softmax Jacobians; vanishing_share: the
    share of rows with ||J||_F < VANISHING; grad_scores_norm and grad_q_norm: the
    mean norm of the gradient that reaches the scores and q, from a fixed random
    upstream gradient on the weights (unit variance, one per row), so the curves
    differ only by the scale. Over up to GRADIENT_ROWS rows that see ≥ 2 keys.
    """

    multiples: list[float]
    jacobian_norm: list[float]
    vanishing_share: list[float]
    grad_scores_norm: list[float]
    grad_q_norm: list[float]
    entropy: list[float]


def gradient_curve(
    record: AttentionRecord,
    layer: int,
    head: int,
    multiples=GRADIENT_MULTIPLES,
    seed: int = 0,
    *,
    device: torch.device | str | None = None,
) -> GradientCurve | None:
    """How much gradient the softmax passes back, as the scale grows: the tutorial's "gradients keep flowing".

    None when no row of the layer sees two keys (a one-token text): a row with one key has no choice to make, so
    there is no gradient to measure. Computed on ``device`` (the model's; the CPU when None), read back once.
    """
    capture, device = record.layers[layer], _device(device)
    live = record.live_rows()[layer].nonzero()[:, 0]
    if len(live) == 0:
        return None
    if len(live) > GRADIENT_ROWS:
        live = live[torch.linspace(0, len(live) - 1, GRADIENT_ROWS).round().long()]
    q = capture.q[head, live].to(device)  # (R, hd)
    k = _kv_head(capture, head, device)[0, 0]  # (k_len, hd)
    keep = torch.stack([capture.keys.block(int(r), int(r) + 1)[0] for r in live]).to(device)  # (R, k_len)
    raw = (q @ k.T).masked_fill(~keep, -math.inf)  # (R, k_len)
    upstream = torch.randn(raw.shape, generator=torch.Generator().manual_seed(seed)).to(device).masked_fill(~keep, 0.0)
    correct = capture.q.shape[-1] ** -0.5
    names = ("jac", "vanishing", "ds", "dq", "entropy")
    points = []  # per multiple, the five means: (5,) on the device
    for multiple in multiples:
        factor = correct * multiple
        entropy, _, p = softmax_rows(raw * factor)  # (R, k_len)
        p2 = (p * p).sum(-1)
        jacobian = (p2 - 2 * (p**3).sum(-1) + p2 * p2).clamp_min(0).sqrt()  # ||diag(p) - p pᵀ||_F per row
        ds = p * (upstream - (p * upstream).sum(-1, keepdim=True))  # dL/ds = J u, (R, k_len)
        dq = (factor * ds @ k).norm(dim=-1).mean()  # dL/dq = factor · (dL/ds) K
        means = (jacobian.mean(), (jacobian < VANISHING).float().mean(), ds.norm(dim=-1).mean(), dq, entropy.mean())
        points.append(torch.stack(means))
    values = torch.stack(points).T.cpu().tolist() if points else [[] for _ in names]  # (5, n_multiples): one read back
    curve = dict(zip(names, values, strict=True))
    return GradientCurve(list(multiples), curve["jac"], curve["vanishing"], curve["ds"], curve["dq"], curve["entropy"])


def scaling_json(rows: ScalingRows, threshold: float = SATURATED) -> dict:
    """The ``python -m attnviz scaling --json`` object (an exact contract; see docs/cli.md)."""
    table = rows.table(threshold)

    def finite(value: float) -> float | None:
        return None if math.isnan(value) else round(float(value), 6)

    heads = []
    for record in table.to_dict("records"):
        heads.append(
            {
                "layer": int(record["layer"]),
                "head": int(record["head"]),
                **{
                    stat: {kind: finite(record[f"{stat}_{kind}"]) for kind in SCALE_KINDS}
                    for stat in ("entropy", "entropy_norm", "saturated_share")
                },
            }
        )
    return {"head_dim": rows.head_dim, "d_model": rows.d_model, "scales": dict(rows.factors), "heads": heads}

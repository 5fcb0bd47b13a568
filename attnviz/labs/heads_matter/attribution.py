"""Attribution patching: every head's effect estimated at once, to first order (Nanda; AtP, Kramár et al. 2024).

ΔM ≈ Σ_t (z_new − z_old)_t · ∂M/∂z_t, z a head's output (what the output projection reads), the gradient taken
once, on the run patched into: one forward and one backward (plus, for two texts, the run the new z comes from,
which exact patching runs anyway). For an ablation, z_new = 0 (zero) or z's mean over the positions (mean), and M
the text's mean next-token loss. Each head's own z is the one the other run computed, softmax and all, never a
linearisation through the head's queries and keys: AtP*'s QK fix. Only what comes after the head is linearised.

Two known ways it misleads are reported per head: a **saturated** head (most of its queries put > 0.99 on one key,
in either run), where a first-order reading through attention is least to be trusted, and **cancellation**
(positions whose terms cancel: |Σ_t e_t| below a tenth of Σ_t |e_t|). Cancellation across the layers after a head
(two paths whose effects cancel in the gradient, not in the real change) is what AtP*'s **GradDrop** addresses, an
option here (``graddrop=True``): one more backward per layer ℓ with the gradient flowing back through layer ℓ's
attention output set to zero (the forward unchanged), and a head's score 1/(L−1) Σ_ℓ |Σ_t e_t^(ℓ)|, the mean of
the L−1 non-zero |estimates| (dropping the head's own layer zeroes its gradient), as Kramár et al. 2024 (eq. 11)
define it for an attention node. It is a size, never a sign; a head whose GradDrop score is over
:data:`~attnviz.labs.heads_matter.agreement.SIZE_FACTOR` × its |estimate| is flagged ("graddrop": the full gradient cancels
what the paths do one by one). The estimate's top heads are then confirmed exactly.

An encoder has no loss: its estimate is the size of each head's change to the last hidden states, through random
directions r_k (E[(r·v)²] = ‖v‖²): one forward and one backward over :data:`PROBES` rows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from attnviz.core.admission import Need
from attnviz.core.attention import reduction_dtype
from attnviz.errors import ModelUnavailableError
from attnviz.i18n.message import msg
from attnviz.labs.heads_matter.agreement import SIZE_FACTOR, SIZE_FLOOR, by_size
from attnviz.labs.heads_matter.common import BACKWARD_PASSES, PROBES, estimate_bytes, lab_need, rounded
from attnviz.labs.heads_matter.patching import Head, Metric, RunPair, edit_source, metric_of
from attnviz.models.ablation import check_mode
from attnviz.models.source import AttentionSource, Capability, EditsHeads, Encoding

SATURATED = 0.99  # a query row is saturated when its largest weight is above this
SATURATED_SHARE = 0.5  # ... and a head when this share of its rows are, in either run
CANCELLING = 0.1  # a head's estimate cancels when |Σ_t e_t| < this × Σ_t |e_t|
ESTIMATE_MODES = ("zero", "mean")  # the ablations the estimate covers ("first" needs each head's values)


@dataclass(frozen=True)
class Estimate:
    """Attribution patching's figures: ``values`` (n_layer × n_head) the estimated change of M (or of an
    encoder's output, a norm), ``seconds`` and ``passes`` (forward-equivalent: a backward counted as one), heads
    saturated in either run, heads whose positions cancel."""

    values: list[list[float]]
    seconds: float
    passes: str
    saturated: list[Head] = field(default_factory=list)
    cancelling: list[Head] = field(default_factory=list)
    kind: str = "loss"  # what was run: "loss" (an LM's), "probes" (an encoder's), "patch" (two texts)
    graddrop: list[list[float]] | None = None  # AtP*'s GradDrop score (n_layer × n_head, ≥ 0), when asked for
    graddrop_flagged: list[Head] = field(default_factory=list)  # GradDrop over SIZE_FACTOR × |estimate|

    def ranked(self, k: int | None = None) -> list[tuple[int, int, float]]:
        """Heads by the estimate's size, largest first: GradDrop's score when it ran (AtP*'s ranking), else
        |value|; each with its signed value."""
        if self.graddrop is None:
            return by_size(self.values, k)
        return [(layer, head, self.values[layer][head]) for layer, head, _ in by_size(self.graddrop, k)]

    def flags(self) -> dict[str, list[Head]]:
        """Each flag's heads, by name: "saturated", "cancelling", and "graddrop" when it ran."""
        found = {"saturated": list(self.saturated), "cancelling": list(self.cancelling)}
        if self.graddrop is not None:
            found["graddrop"] = list(self.graddrop_flagged)
        return found

    def to_json(self) -> dict:
        value = {
            "values": [[rounded(v) for v in row] for row in self.values],
            "seconds": round(self.seconds, 3),
            "passes": self.passes,
            "saturated": [f"{layer}.{head}" for layer, head in self.saturated],
            "cancelling": [f"{layer}.{head}" for layer, head in self.cancelling],
        }
        if self.graddrop is not None:  # only when asked for: the keys without it stay as they were
            value["graddrop"] = [[rounded(v) for v in row] for row in self.graddrop]
            value["graddrop_flagged"] = [f"{layer}.{head}" for layer, head in self.graddrop_flagged]
        return value


def _gradients(
    source: EditsHeads, encoding: Encoding, rows: int, metric_fn, changes=None
) -> tuple[list[Tensor], list[Tensor], Tensor, list[Tensor] | None]:
    """One forward and one backward of ``encoding`` in ``rows`` rows: every layer's z (rows, T, n_head, head_dim) and
    ∂(Σ metric_fn(out))/∂z, float32 where the layer ran (its callers reduce them there), and the outputs. With ``changes`` (the layers' z -> each layer's change (T, n_head,
    head_dim)): also GradDrop's Σ_ℓ |Σ_t e_t^(ℓ)| per layer (n_head,), one more backward per layer ℓ with the
    gradient through layer ℓ's attention output (what its output projection reads) dropped, on the same graph."""
    deltas: dict[int, Tensor] = {}
    zs: dict[int, Tensor] = {}
    kept = {"dropped": -1}  # the layer whose gradient the next backward drops (-1: none)

    def drop(layer: int):
        return lambda g: g * 0.0 if kept["dropped"] == layer else g

    def edit(layer: int, z: Tensor) -> Tensor:
        delta = torch.zeros_like(z, requires_grad=True)
        deltas[layer], zs[layer] = delta, z.detach()
        edited = z + delta
        if changes is not None:  # the gradient to z and its delta both pass here: dropped, nothing flows below it
            edited.register_hook(drop(layer))
        return edited

    out, _ = source.head_pass(encoding, rows, edit, grad=True)
    order = sorted(deltas)

    def backward(retain: bool) -> list[Tensor]:
        with torch.enable_grad():
            found = torch.autograd.grad(total, [deltas[i] for i in order], allow_unused=True, retain_graph=retain)
        return [(torch.zeros_like(deltas[i]) if g is None else g).float() for i, g in zip(order, found, strict=True)]

    with torch.enable_grad():
        total = metric_fn(out).sum()
    grads = backward(retain=changes is not None)
    z_list = [zs[i].float() for i in order]  # on each layer's device, as the gradients: reduced there
    dropped_sums = None
    if changes is not None:
        change = changes(z_list)
        dropped_sums = [torch.zeros(z.shape[2], dtype=torch.float64) for z in z_list]
        for n, layer in enumerate(order):
            kept["dropped"] = layer
            dropped = backward(retain=n < len(order) - 1)
            for i, g in enumerate(dropped):
                dropped_sums[i] += _terms(change[i], g[0]).sum(dim=0).abs().cpu()  # (n_head,) crosses
        kept["dropped"] = -1
    return z_list, grads, out.detach(), dropped_sums


def _terms(change: Tensor, grad: Tensor) -> Tensor:
    """Each position's first-order term per head: change, grad (T, n_head, head_dim) -> (T, n_head), on their device
    in its :func:`~attnviz.core.attention.reduction_dtype` (float64 on the CPU)."""
    wide = reduction_dtype(grad.device)
    return (change.to(grad.device, wide) * grad.to(wide)).sum(dim=-1)


def _flags(terms: list[Tensor]) -> list[Head]:
    """Heads whose position terms cancel (:data:`CANCELLING`)."""
    found = []
    for layer, t in enumerate(terms):  # (T, n_head)
        total, size = t.sum(dim=0).abs(), t.abs().sum(dim=0)
        for head in range(t.shape[1]):
            if float(size[head]) > 0 and float(total[head]) < CANCELLING * float(size[head]):
                found.append((layer, head))
    return found


def graddrop_scores(dropped_sums: list[Tensor], scale: float = 1.0) -> list[list[float]]:
    """GradDrop's score per head: Σ_ℓ |estimate with layer ℓ's gradient dropped| / (L − 1) (one layer: the sum), over
    |``scale``| (a patching estimate's gap)."""
    divisor = max(len(dropped_sums) - 1, 1) * abs(scale)
    return [[float(s[head]) / divisor for head in range(s.shape[0])] for s in dropped_sums]


def graddrop_flags(values: list[list[float]], scores: list[list[float]]) -> list[Head]:
    """Heads whose GradDrop score is over SIZE_FACTOR × |estimate|, among those over SIZE_FLOOR × the largest score:
    the paths after them cancel in the full gradient."""
    largest = max((v for row in scores for v in row), default=0.0)
    return [
        (layer, head)
        for layer, row in enumerate(scores)
        for head, score in enumerate(row)
        if largest > 0 and score >= SIZE_FLOOR * largest and score > SIZE_FACTOR * abs(values[layer][head])
    ]


def saturated_heads(source: AttentionSource, texts: Sequence[str], max_tokens: int) -> list[Head]:
    """Heads whose live query rows put more than :data:`SATURATED` on one key in at least :data:`SATURATED_SHARE`
    of rows, in any of ``texts`` (read from each text's record)."""
    found: set[Head] = set()
    for text in texts:
        try:
            record = source.run(text, max_tokens, keep_qk=False)
        except ModelUnavailableError:  # past the eager route's bound: the estimate stands, its flags unread
            return []
        live = record.live_rows()[:, None, :]  # (n_layer, 1, T)
        top = record.row_stat("max_weight")  # (n_layer, n_head, T)
        rows = live.sum(dim=-1).clamp_min(1)
        share = ((top > SATURATED) & live).sum(dim=-1) / rows  # (n_layer, n_head)
        found |= {(int(layer), int(head)) for layer, head in (share >= SATURATED_SHARE).nonzero().tolist()}
    return sorted(found)


def estimate_patching(
    source: AttentionSource, pair: RunPair, clean_text: str, corrupt_text: str, graddrop: bool = False
) -> Estimate:
    """AtP of patching each head from the clean run into the corrupted one: ΔM ≈ Σ_t (z_clean − z_corrupt)·∂M/∂z
    at the corrupted run (one forward and one backward; the clean run's z were kept by :func:`run_pair`), as a
    fraction of the gap; ``graddrop``: also GradDrop's scores (one more backward per layer)."""
    source = edit_source(source)
    start = time.perf_counter()
    changes = [pair.clean_z[i] - pair.corrupt_z[i] for i in range(pair.n_layer)]
    _, grads, _, dropped = _gradients(
        source,
        pair.corrupt_encoding,
        1,
        lambda out: metric_of(pair.metric, out, pair.clean_out.to(out.device), pair.clean_ids),
        (lambda zs: changes) if graddrop else None,
    )
    terms = [_terms(changes[i], grads[i][0]).cpu() for i in range(pair.n_layer)]  # (T, n_head) each, once a layer
    gap = pair.gap if pair.gap != 0 else math.nan
    values = [[float(t[:, head].sum()) / gap for head in range(t.shape[1])] for t in terms]
    scores = graddrop_scores(dropped, gap) if dropped is not None else None
    seconds = time.perf_counter() - start
    saturated = saturated_heads(source, [clean_text, corrupt_text], pair.n_tokens)
    passes = "1 forward + 1 backward (+ the clean run's forward, shared)"
    return Estimate(
        values,
        seconds,
        passes if scores is None else f"{passes} + {pair.n_layer} backward (GradDrop)",
        saturated,
        _flags(terms),
        "patch",
        scores,
        graddrop_flags(values, scores) if scores is not None else [],
    )


def _ablation_change(z: Tensor, mode: str) -> Tensor:
    """What a head's ablation changes its z by, z (T, n_head, head_dim): −z (zero) or mean_t z − z (mean)."""
    return -z if mode == "zero" else z.mean(dim=0, keepdim=True) - z


def estimate_ablation(
    source: AttentionSource, text: str, max_tokens: int, mode: str = "zero", graddrop: bool = False
) -> Estimate:
    """AtP of ablating each head alone on ``text``: an LM's change of the mean next-token loss, ΔM ≈
    Σ_t (z_ablated − z)·∂loss/∂z (z_ablated 0, or z's mean over the positions); an encoder's, the norm of the change
    of its last hidden states, ‖Δh‖ ≈ sqrt(mean_k (Σ_t (z_ablated − z)·∂(r_k·h)/∂z)²) over :data:`PROBES` random
    directions r_k (E[(r·v)²] = ‖v‖²), divided by √T. One forward and one backward (an encoder's of PROBES rows);
    ``graddrop`` (an LM's only): also GradDrop's scores, one more backward per layer."""
    check_mode(mode)
    if mode not in ESTIMATE_MODES:
        raise ValueError(msg("patching_lib.estimate_mode", mode=mode))
    source = edit_source(source)
    encoding = source.encode(text, max_tokens)
    if not encoding.tokens:
        raise ValueError(msg("patching_lib.no_tokens"))
    logits = Capability.GENERATE in source.capabilities
    ids = encoding.ids or ()
    if logits and len(ids) < 2:
        raise ValueError(msg("patching_lib.one_token"))
    if graddrop and not logits:
        raise ValueError(msg("estimate_check.graddrop_encoder", name=source.name))
    start = time.perf_counter()
    scores = None
    if logits:
        loss = Metric("loss")
        zs, grads, _, dropped = _gradients(
            source,
            encoding,
            1,
            lambda out: metric_of(loss, out, out[0].detach(), ids),
            (lambda zs: [_ablation_change(z[0], mode) for z in zs]) if graddrop else None,
        )
        terms = [_terms(_ablation_change(z[0], mode), g[0]).cpu() for z, g in zip(zs, grads, strict=True)]
        values = [[float(t[:, head].sum()) for head in range(t.shape[1])] for t in terms]
        passes = "1 forward + 1 backward"
        if dropped is not None:
            scores = graddrop_scores(dropped)
            passes += f" + {len(zs)} backward (GradDrop)"
    else:
        generator = torch.Generator().manual_seed(0)
        probes: list[Tensor] = []

        def project(out: Tensor) -> Tensor:
            if not probes:
                probes.append(torch.randn(out.shape, generator=generator, dtype=torch.float32).to(out.device))
            return (out.float() * probes[0]).sum(dim=(1, 2))  # (PROBES,)

        zs, grads, _, _ = _gradients(source, encoding, PROBES, project)
        squares = []
        for z, g in zip(zs, grads, strict=True):
            change = _ablation_change(z[0], mode)  # (T, n_head, head_dim)
            per_probe = torch.stack([_terms(change, g[k]).sum(dim=0) for k in range(PROBES)])  # (PROBES, n_head)
            squares.append((per_probe**2).mean(dim=0).cpu())  # (n_head,)
        terms = []
        values = [[math.sqrt(float(s[head]) / len(encoding.tokens)) for head in range(s.shape[0])] for s in squares]
        passes = f"1 forward + 1 backward of {PROBES} probe rows"
    seconds = time.perf_counter() - start
    saturated = saturated_heads(source, [text], max_tokens)
    return Estimate(
        values,
        seconds,
        passes,
        saturated,
        _flags(terms) if terms else [],
        "loss" if logits else "probes",
        scores,
        graddrop_flags(values, scores) if scores is not None else [],
    )


def estimate_need(source: AttentionSource, n_tokens: int, graddrop: bool = False) -> Need:
    """:func:`estimate_ablation`'s price on ``source``'s device: :func:`estimate_bytes`; a forward and a backward (of
    PROBES rows for an encoder), GradDrop's backward a layer (``graddrop``), and the capture that finds the saturated
    heads (:func:`attnviz.labs.heads_matter.common.lab_need`)."""
    rows = 1 if Capability.GENERATE in source.capabilities else PROBES
    backward = BACKWARD_PASSES * (1 + (source.n_layer if graddrop else 0))
    return lab_need(source, estimate_bytes(source, n_tokens), n_tokens, rows * (1 + backward) + 1)


def pair_estimate_need(source: AttentionSource, n_tokens: int) -> Need:
    """The Patching page's first request, :func:`attnviz.labs.heads_matter.patching.run_pair` and
    :func:`estimate_patching`, priced on ``source``'s device: both runs' :func:`estimate_bytes` held at once; the two
    runs, a forward and a backward of the corrupted one, and the captures of both texts that find the saturated
    heads."""
    return lab_need(source, 2 * estimate_bytes(source, n_tokens), n_tokens, 2 + (1 + BACKWARD_PASSES) + 2)

"""Activation patching between two texts: which heads carry the difference, exactly.

A head's output z (what the output projection reads, (T, head_dim) for one head) is the node. On two texts of the
same token length, a **clean** one and a **corrupted** one (the indirect-object prompt with its names swapped),
a metric M tells the two runs apart. The corrupted text runs with one head's z taken from the clean run at every
position, for every head: the fraction of the metric it restores, (M(patched) − M(corrupt)) / (M(clean) −
M(corrupt)), 1 where the head alone carries the difference. One row of a batched pass per head, each pass started
at its heads' layer from the corrupted run's cached layers (:mod:`attnviz.models.resume`). Its first-order
estimate, in one forward and one backward, is :mod:`attnviz.labs.heads_matter.attribution`'s.

Metrics (an LM's, float64): ``logit-diff`` of two tokens at the last position; ``loss``, the mean next-token
cross-entropy of the clean text's tokens; ``kl``, the mean KL(clean ‖ run) of the next-token distributions; an
encoder's ``hidden``, the mean cosine distance of the last hidden states from the clean run's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.core.admission import Need
from attnviz.core.attention import reduction_dtype
from attnviz.core.progress import Progress, or_none
from attnviz.core.time_agreement import TimeLog, cpu_share
from attnviz.i18n.message import Message, msg
from attnviz.labs.heads_matter import schedule
from attnviz.labs.heads_matter.agreement import TOP_K, Agreement, agreement, by_size
from attnviz.labs.heads_matter.common import (
    PASS_BYTES,
    PASS_ROWS,
    Head,
    estimate_bytes,
    lab_need,
    rounded,
    rows_per_pass,
)
from attnviz.labs.heads_matter.head_specs import check_heads
from attnviz.labs.heads_matter.reductions import cosine_distance
from attnviz.models.resume import CachedLayers
from attnviz.models.source import AttentionSource, Capability, EditsHeads, Encoding

LM_METRICS = ("logit-diff", "loss", "kl")
CANDIDATES = 20  # the most likely next tokens looked through for a metric's defaults
METRICS = (*LM_METRICS, "hidden")


@dataclass(frozen=True)
class Metric:
    """What tells two runs apart: ``kind`` one of :data:`METRICS`; a logit difference's two tokens as typed and
    their ids (once resolved against a tokenizer)."""

    kind: str
    tokens: tuple[str, ...] = ()
    ids: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        if self.kind == "logit-diff":
            return f"logit({self.tokens[0]!r}) − logit({self.tokens[1]!r})"
        return self.kind

    def to_json(self) -> dict:
        return {"kind": self.kind, "tokens": list(self.tokens), "ids": list(self.ids)}


def parse_metric(spec: str) -> Metric:
    """``logit-diff:A,B`` (the text after the colon split at commas, spaces kept: ``logit-diff: Mary, John`` is
    " Mary" and " John"), ``loss``, ``kl`` or ``hidden``. ValueError naming what was typed otherwise."""
    kind, colon, rest = spec.partition(":")
    if kind == "logit-diff" and colon:
        tokens = tuple(rest.split(","))
        if len(tokens) != 2 or not all(tokens):
            raise ValueError(msg("patching_lib.bad_tokens", spec=spec))
        return Metric(kind, tokens)
    if kind in METRICS and kind != "logit-diff" and not colon:
        return Metric(kind)
    raise ValueError(msg("patching_lib.bad_metric", spec=spec))


def resolve_metric(source: AttentionSource, metric: Metric, logits: bool) -> Metric:
    """``metric`` with its tokens' ids: each must encode (without special tokens) to exactly one token, else
    ValueError naming how it splits. An LM's metrics on a source without an LM head, and ``hidden`` on one with,
    are refused."""
    if logits and metric.kind == "hidden":
        raise ValueError(msg("patching_lib.hidden_for_lm", name=source.name))
    if not logits and metric.kind != "hidden":
        raise ValueError(msg("patching_lib.needs_lm", name=source.name, metric=metric.kind))
    if metric.kind != "logit-diff":
        return metric
    ids = []
    for token in metric.tokens:
        found = source.token_ids(token)
        if len(found) != 1:
            pieces = " + ".join(repr(t) for t in source.token_texts(found)) or "nothing"
            raise ValueError(msg("patching_lib.not_one_token", token=token, n=len(found), pieces=pieces))
        ids.append(found[0])
    return Metric(metric.kind, metric.tokens, tuple(ids))


def metric_of(metric: Metric, out: Tensor, clean: Tensor, ids: Sequence[int]) -> Tensor:
    """M of each row: out (R, T, vocab or d_model) against the clean run's clean (T, vocab or d_model, on any device)
    and token ids -> (R,) on out's device in its :func:`~attnviz.core.attention.reduction_dtype` (float64 on the
    CPU), differentiable through ``out``."""
    wide = reduction_dtype(out.device)
    if metric.kind == "logit-diff":
        last = out[:, -1].to(wide)  # (R, vocab)
        return last[:, metric.ids[0]] - last[:, metric.ids[1]]
    if metric.kind == "loss":
        if out.shape[1] < 2:
            raise ValueError(msg("patching_lib.one_token"))
        targets = torch.as_tensor(list(ids[1:]), dtype=torch.long, device=out.device)  # (T - 1,)
        log_q = torch.log_softmax(out[:, :-1].to(wide), dim=-1)  # (R, T - 1, vocab)
        return -log_q.gather(-1, targets[None, :, None].expand(out.shape[0], -1, 1))[..., 0].mean(dim=-1)
    if metric.kind == "kl":
        log_p = torch.log_softmax(clean.to(out.device, wide), dim=-1)[None]  # (1, T, vocab)
        log_q = torch.log_softmax(out.to(wide), dim=-1)  # (R, T, vocab)
        return (log_p.exp() * (log_p - log_q)).sum(dim=-1).mean(dim=-1)
    return cosine_distance(clean.to(out.device)[None].expand_as(out), out).mean(dim=-1)  # equal rows: exactly 0


@dataclass(frozen=True, eq=False)
class RunPair:
    """The clean and corrupted runs patching compares: their ids, outputs (T, width) float32 on the CPU, every
    layer's z (T, n_head, head_dim), the metric on each, the corrupted run's cached layers."""

    model: str
    clean_ids: tuple[int, ...]
    clean_encoding: Encoding
    corrupt_encoding: Encoding
    clean_tokens: list[str]
    corrupt_tokens: list[str]
    metric: Metric
    logits: bool
    clean_out: Tensor
    corrupt_out: Tensor
    clean_z: list[Tensor]
    corrupt_z: list[Tensor]
    clean: float
    corrupt: float
    cache: CachedLayers | None
    n_head: int

    @property
    def n_tokens(self) -> int:
        return len(self.clean_encoding.tokens)

    @property
    def nbytes(self) -> int:
        """What it holds: both runs' outputs, every layer's z of both, the corrupted run's cached layers."""
        tensors = [self.clean_out, self.corrupt_out, *self.clean_z, *self.corrupt_z]
        held = sum(t.numel() * t.element_size() for t in tensors)
        return int(held + (self.cache.nbytes if self.cache is not None else 0))

    @property
    def n_layer(self) -> int:
        return len(self.clean_z)

    @property
    def gap(self) -> float:
        return self.clean - self.corrupt

    def fraction(self, value: float) -> float | None:
        """The share of the clean−corrupt gap that ``value`` of M restores; None where the gap is 0."""
        return None if self.gap == 0 else (value - self.corrupt) / self.gap


def _recorder(kept: dict[int, Tensor]):
    def record(layer: int, z: Tensor) -> Tensor:
        kept[layer] = z[0].detach().float().clone()  # (T, n_head, head_dim)
        return z

    return record


def edit_source(source: AttentionSource) -> EditsHeads:
    """``source`` when it can edit each head's output; ValueError naming it otherwise."""
    if Capability.EDIT_HEADS not in source.capabilities or not isinstance(source, EditsHeads):
        raise ValueError(msg("patching_lib.unsupported", name=source.name))
    return source


def run_pair(source: AttentionSource, clean: str, corrupt: str, max_tokens: int, metric: Metric) -> RunPair:
    """Both texts run once (their z kept) and the corrupted one's layers cached. ValueError when either text
    has no tokens, when they differ in token length, or for a metric the source cannot give."""
    source = edit_source(source)
    clean_enc, corrupt_enc = source.encode(clean, max_tokens), source.encode(corrupt, max_tokens)
    if not clean_enc.tokens or not corrupt_enc.tokens:
        raise ValueError(msg("patching_lib.no_tokens"))
    if len(clean_enc.tokens) != len(corrupt_enc.tokens):
        raise ValueError(msg("patching_lib.lengths", clean=len(clean_enc.tokens), corrupt=len(corrupt_enc.tokens)))
    clean_z: dict[int, Tensor] = {}
    corrupt_z: dict[int, Tensor] = {}
    clean_out, _ = source.head_pass(clean_enc, 1, _recorder(clean_z))
    logits = Capability.GENERATE in source.capabilities  # an LM head: logits
    metric = resolve_metric(source, metric, logits)
    _, cache = source.layer_cache(corrupt, max_tokens)
    cache = None if isinstance(cache, str) else cache
    corrupt_out, _ = source.head_pass(corrupt_enc, 1, _recorder(corrupt_z))
    clean_out, corrupt_out = clean_out[0].float().cpu(), corrupt_out[0].float().cpu()  # (T, width)
    values = metric_of(metric, torch.stack([clean_out, corrupt_out]), clean_out, clean_enc.ids or ())
    return RunPair(
        model=source.name,
        clean_ids=tuple(clean_enc.ids or ()),
        clean_encoding=clean_enc,
        corrupt_encoding=corrupt_enc,
        clean_tokens=[t.text for t in clean_enc.tokens],
        corrupt_tokens=[t.text for t in corrupt_enc.tokens],
        metric=metric,
        logits=logits,
        clean_out=clean_out,
        corrupt_out=corrupt_out,
        clean_z=[clean_z[i] for i in sorted(clean_z)],
        corrupt_z=[corrupt_z[i] for i in sorted(corrupt_z)],
        clean=float(values[0]),
        corrupt=float(values[1]),
        cache=cache,
        n_head=source.n_head,
    )


def _replacing(rows: Sequence[Head], values: Sequence[Tensor]):
    """An edit giving row r head rows[r]'s z from ``values`` (one (T, n_head, head_dim) per layer)."""

    def edit(layer: int, z: Tensor) -> Tensor:
        picked = [(r, head) for r, (at, head) in enumerate(rows) if at == layer]
        if not picked:
            return z
        z = z.clone()
        for r, head in picked:
            z[r, :, head] = values[layer][:, head].to(z.dtype).to(z.device)
        return z

    return edit


def patch_rows(pair: RunPair, limit: int = PASS_BYTES) -> int:
    """Heads a pass of exact patching holds: its (rows, T, width) outputs within ``limit``, at most PASS_ROWS."""
    return max(1, min(PASS_ROWS, rows_per_pass(pair.n_tokens, pair.clean_out.shape[-1], limit)))


def patch_piece(source: AttentionSource, pair: RunPair, heads: Sequence[Head]) -> dict[Head, float]:
    """The corrupted text with each of ``heads`` patched from the clean run (a row each), from the heads' earliest
    layer on: {head: M of its row}."""
    source = edit_source(source)
    first = min(layer for layer, _ in heads)
    out, _ = source.head_pass(
        pair.corrupt_encoding, len(heads), _replacing(heads, pair.clean_z), resume=pair.cache, first_layer=first
    )
    return dict(zip(heads, _row_metrics(pair, out), strict=True))


def _row_metrics(pair: RunPair, out: Tensor) -> list[float]:
    """M of each row of ``out`` (R, T, width) on its device, a row at a time (the arithmetic of one row alone): only
    the R values cross to the host, at once."""
    rows = [metric_of(pair.metric, out[r : r + 1].float(), pair.clean_out, pair.clean_ids) for r in range(len(out))]
    return torch.cat(rows).cpu().tolist()  # (R,)


def patch_pieces(heads: Sequence[Head], rows: int) -> list[list[Head]]:
    """``heads`` in order, ``rows`` a pass (the last pass holds what is left)."""
    return schedule.cut_pieces(heads, lambda head: rows)


@dataclass(frozen=True, eq=False)
class EstimatedPair:
    """Two texts run for patching and the estimate on them (None where the metric is the same on both)."""

    pair: RunPair
    estimate: object | None

    @property
    def nbytes(self) -> int:
        return self.pair.nbytes


@dataclass(frozen=True)
class PatchResult:
    """Activation patching on two texts: the metric on each, every head's restored fraction (None: not run), and
    the attribution estimate beside it (an :class:`attnviz.labs.heads_matter.attribution.Estimate`, which imports this module)."""

    model: str
    tokens: list[str]
    corrupt_tokens: list[str]
    metric: Metric
    clean: float
    corrupt: float
    effects: list[list[float | None]]
    seconds: float
    estimate: object | None = None

    def ranked(self, k: int | None = None) -> list[tuple[int, int, float]]:
        return by_size(self.effects, k)

    def agreement(self) -> Agreement | None:
        if self.estimate is None or not any(v is not None for row in self.effects for v in row):
            return None
        return agreement(self.estimate.values, self.effects)

    def to_json(self) -> dict:
        value = {
            "model": self.model,
            "tokens": self.tokens,
            "metric": self.metric.label
            if self.metric.kind != "logit-diff"
            else f"logit-diff:{','.join(self.metric.tokens)}",
            "clean": rounded(self.clean),
            "corrupt": rounded(self.corrupt),
            "effects": [[rounded(v) for v in row] for row in self.effects],
            "estimate": None,
        }
        if self.estimate is not None:
            value["estimate"] = {
                **self.estimate.to_json(),
                "agreement": (a.to_json() if (a := self.agreement()) else None),
            }
        return value


def patch_heads(
    source: AttentionSource,
    pair: RunPair,
    heads: Sequence[Head],
    progress: Progress | None = None,
    done: dict[Head, float] | None = None,
    log: TimeLog | None = None,
    price: Callable[[Sequence[Head]], float] | None = None,
) -> dict[Head, float]:
    """Exact patching of ``heads`` (each alone), a pass at a time; ``done`` is filled as each pass ends (a stop keeps
    it): {head: M of the patched run}. ``log`` and ``price`` (a pass's predicted seconds,
    :meth:`PatchPlan.piece_seconds`): a lap per pass, its predicted time beside what it took."""
    done = {} if done is None else done
    pieces = patch_pieces([head for head in heads if head not in done], patch_rows(pair))
    schedule.run_passes(
        pieces,
        lambda piece: done.update(patch_piece(source, pair, piece)),
        progress,
        "patching_lib.progress",  # as the button
        len(heads),
        price,
        log,
    )
    return done


def patch_result(pair: RunPair, values: dict[Head, float], seconds: float, estimate: object | None) -> PatchResult:
    effects = [
        [pair.fraction(values[(layer, head)]) if (layer, head) in values else None for head in range(pair.n_head)]
        for layer in range(pair.n_layer)
    ]
    return PatchResult(
        model=pair.model,
        tokens=pair.clean_tokens,
        corrupt_tokens=pair.corrupt_tokens,
        metric=pair.metric,
        clean=pair.clean,
        corrupt=pair.corrupt,
        effects=effects,
        seconds=seconds,
        estimate=estimate,
    )


def _replacing_at(head: Head, rows: Sequence[Sequence[int]], values: Sequence[Tensor]):
    """An edit giving row r ``head``'s z from ``values`` at the positions rows[r] only (its other positions keep
    the corrupted run's)."""
    at, index = head

    def edit(layer: int, z: Tensor) -> Tensor:
        if layer != at:
            return z
        z = z.clone()  # (R, T, n_head, head_dim)
        for r, positions in enumerate(rows):
            where = list(positions)
            z[r, where, index] = values[layer][where, index].to(z.dtype).to(z.device)
        return z

    return edit


def patch_position_sets(
    source: AttentionSource, pair: RunPair, head: Head, sets: Sequence[Sequence[int]]
) -> list[float]:
    """The corrupted text with ``head``'s z taken from the clean run at each set of positions (a row each, one pass
    resumed at the head's layer from the corrupted run's cached layers): M of each row. Every position at once is
    :func:`patch_heads` of the head; one position at a time is :func:`patch_positions`."""
    source = edit_source(source)
    ((layer, index),) = check_heads([head], pair.n_layer, pair.n_head)
    for positions in sets:
        if not positions or not all(0 <= p < pair.n_tokens for p in positions):
            raise ValueError(msg("patch_positions_lib.range", last=pair.n_tokens - 1))
    out, _ = source.head_pass(
        pair.corrupt_encoding,
        len(sets),
        _replacing_at((layer, index), sets, pair.clean_z),
        resume=pair.cache,
        first_layer=layer,
    )
    return _row_metrics(pair, out)


@dataclass(frozen=True)
class PositionsResult:
    """One head patched at one position at a time: each position's restored fraction (None where the gap is 0 or
    the position was not run), M of each patched run, the clean text's tokens."""

    head: Head
    tokens: list[str]
    values: list[float | None]
    fractions: list[float | None]

    def to_json(self) -> dict:
        return {
            "head": f"{self.head[0]}.{self.head[1]}",
            "values": [rounded(v) for v in self.values],
            "fractions": [rounded(v) for v in self.fractions],
        }


def patch_positions(
    source: AttentionSource,
    pair: RunPair,
    head: Head,
    progress: Progress | None = None,
    done: dict[int, float] | None = None,
) -> PositionsResult:
    """``head`` patched from the clean run at one position at a time (which positions carry its effect, as
    TransformerLens users patch ``hook_z`` per position): n_tokens rows, :func:`patch_rows` a pass. ``done`` is
    filled as each pass ends (a stop keeps it; a later call runs only the positions left)."""
    done = {} if done is None else done
    check_heads([head], pair.n_layer, pair.n_head)
    left = [p for p in range(pair.n_tokens) if p not in done]
    progress = or_none(progress)
    progress.stage("patch_positions_lib.progress", len(left))
    rows = patch_rows(pair)
    for start in range(0, len(left), rows):
        piece = left[start : start + rows]
        done.update(zip(piece, patch_position_sets(source, pair, head, [[p] for p in piece]), strict=True))
        progress.step(len(piece))
    return positions_result(pair, head, done)


def positions_result(pair: RunPair, head: Head, done: dict[int, float]) -> PositionsResult:
    """The :class:`PositionsResult` of ``done`` ({position: M of the run patched there}) on ``pair``."""
    values = [done.get(p) for p in range(pair.n_tokens)]
    return PositionsResult(
        head=(int(head[0]), int(head[1])),
        tokens=pair.clean_tokens,
        values=values,
        fractions=[None if v is None else pair.fraction(v) for v in values],
    )


def position_passes(pair: RunPair) -> int:
    """The passes :func:`patch_positions` runs: n_tokens rows, :func:`patch_rows` a pass."""
    return math.ceil(pair.n_tokens / patch_rows(pair))


def confirm(estimate, k: int = TOP_K) -> list[Head]:
    """The estimate's top k heads by |value|: the ones a click (or the CLI) runs exactly."""
    return [(layer, head) for layer, head, _ in estimate.ranked(k)]


@dataclass(frozen=True, eq=False)
class PatchPlan:
    """Exact patching of every head, priced: ``rows`` heads a pass, a pass from the first layer timed here
    (``first_seconds``) and one from the last (``last_seconds``), their heads' values already in ``done``;
    ``timed_share``: the CPU seconds a second while they were timed."""

    heads: list[Head]
    rows: int
    first_seconds: float
    last_seconds: float
    done: dict[Head, float]
    n_layer: int
    timed_share: float | None = None

    def pieces(self, done: dict[Head, float] | None = None) -> list[list[Head]]:
        left = [head for head in self.heads if head not in {**self.done, **(done or {})}]
        return patch_pieces(left, self.rows)

    def seconds(self, done: dict[Head, float] | None = None) -> float:
        """The pieces left, each priced by :meth:`piece_seconds`."""
        return sum((self.piece_seconds(piece) for piece in self.pieces(done)), 0.0)

    def piece_seconds(self, piece: Sequence[Head]) -> float:
        """A pass's price: between a first-layer and a last-layer pass by its first head's layer, by its rows."""
        share = min(layer for layer, _ in piece) / max(1, self.n_layer - 1)
        return (self.first_seconds - (self.first_seconds - self.last_seconds) * share) * len(piece) / self.rows

    def positions_seconds(self, head: Head, n_positions: int) -> float:
        """:func:`patch_positions`'s price for ``n_positions`` positions left: its passes, each a pass from the
        head's layer of as many rows."""
        pieces = [min(self.rows, n_positions - start) for start in range(0, n_positions, self.rows)]
        return sum((self.piece_seconds([head] * rows) for rows in pieces), 0.0)


def patch_need(source: AttentionSource, n_tokens: int, seconds: float | None = None) -> Need:
    """Exact patching's price on ``source``'s device, for its timing (:func:`plan_patching`), a click's top heads, every
    head and one head position by position (and the two forwards of :func:`default_tokens`): a pass's peak bounded as
    an estimate's (:func:`attnviz.labs.heads_matter.common.estimate_bytes`); ``seconds``, the time its timing
    predicts for the passes left, or two passes (:func:`attnviz.labs.heads_matter.common.lab_need`)."""
    return lab_need(source, estimate_bytes(source, n_tokens), n_tokens, 2.0, seconds)


def plan_patching(source: AttentionSource, pair: RunPair, heads: Sequence[Head] | None = None) -> PatchPlan:
    """Time the first piece of ``heads`` (default every head, in order) and the last: what patching the rest costs."""
    heads = (
        list(heads)
        if heads is not None
        else [(layer, head) for layer in range(pair.n_layer) for head in range(pair.n_head)]
    )
    rows = patch_rows(pair)
    done: dict[Head, float] = {}
    timings = []
    started = (time.perf_counter(), time.process_time())
    for piece in (heads[:rows], heads[-rows:]):
        piece = [head for head in piece if head not in done]
        if not piece:
            timings.append(timings[-1] if timings else 0.0)
            continue
        start = time.perf_counter()
        done.update(patch_piece(source, pair, piece))
        timings.append((time.perf_counter() - start) * rows / len(piece))
    share = cpu_share(time.perf_counter() - started[0], time.process_time() - started[1])
    return PatchPlan(heads, rows, timings[0], timings[1], done, pair.n_layer, share)


def top_next_token(source: AttentionSource, text: str, max_tokens: int, k: int = 2) -> list[str]:
    """The ``k`` most likely next tokens after ``text`` that a metric can name (an LM's; [] without an LM head):
    each token's text, as the tokenizer reads it back to that one token (a SentencePiece piece decodes without
    its "▁", a byte to a character that encodes otherwise: those are passed over)."""
    source = edit_source(source)
    if Capability.GENERATE not in source.capabilities:
        return []
    encoding = source.encode(text, max_tokens)
    if not encoding.tokens:
        return []
    out, _ = source.head_pass(encoding, 1, lambda layer, z: z)
    ids = out[0, -1].float().topk(min(CANDIDATES, out.shape[-1])).indices.tolist()
    named = [(i, name) for i, name in zip(ids, source.token_texts(ids), strict=True) if source.token_ids(name) == [i]]
    return [name for _, name in named[:k]]


@dataclass(frozen=True)
class MetricTokens:
    """A logit difference's default tokens: ``a`` the clean text's most likely next token, ``b`` the corrupted
    text's; ``note`` says why ``b`` is another token where the two texts agree (None otherwise)."""

    a: str
    b: str
    note: Message | None = None


def default_tokens(
    source: AttentionSource, clean: str, corrupt: str, max_tokens: int, swapped: Sequence[str] = ()
) -> MetricTokens | None:
    """Token A = the clean text's top next token, B = the corrupted text's. Where both are the same (nothing to
    restore), B is a word that was swapped (``swapped``: old and new, read as one token with or without a leading
    space) other than A, else the corrupted run's second most likely token; the note says which. None without an
    LM head."""
    clean_top = top_next_token(source, clean, max_tokens)
    corrupt_top = top_next_token(source, corrupt, max_tokens)
    if not clean_top:
        return None
    a = clean_top[0]
    if corrupt_top and corrupt_top[0] != a:
        return MetricTokens(a, corrupt_top[0])
    for word in swapped:
        for token in (f" {word}", word):
            if token != a and len(source.token_ids(token)) == 1:
                return MetricTokens(a, token, msg("patch_tokens.swapped", a=a, b=token))
    second = next((token for token in (*corrupt_top[1:], *clean_top[1:]) if token != a), None)
    if second is None:
        return None
    return MetricTokens(a, second, msg("patch_tokens.second", a=a, b=second))

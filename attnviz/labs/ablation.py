"""Head ablation: knock heads out and measure what the model's output loses.

Attention weights say where a head looks; ablating it says whether it matters. The source runs the text with some
heads' slice of the output projection's input rewritten (:mod:`attnviz.models.ablation`: ``zero``, ``mean`` over
the positions, or ``first``, the head attending only to the first token) and this lab compares the outputs:

- a model with an LM head: the mean next-token cross-entropy (nats) of predicting token t + 1 from positions
  0 … T − 2, before and after; KL(p_before ‖ p_after) of the next-token distribution at every position (nats),
  its mean over the same positions; the top tokens before and after at each position;
- an encoder (or the embedded model, which has no LM head): the cosine distance of the last hidden states at each
  position, and its mean (``hidden_change``).

Log-softmax, losses, KL and cosine distances are reduced in float64 whatever the model ran in: over a
49,152-token vocabulary float32 is 1e-6 to 1e-4 off, as large as the effect of a weak head.

Ablating nothing runs the same code and changes nothing: 0.0 exactly. The single-head sweep ablates every head
alone, several heads per batched pass (row r ablates its own head), reducing each pass's outputs to one number a
head as it goes; a pass holds at most :data:`PASS_BYTES` of outputs and takes about :data:`PASS_SECONDS` here. It
runs in pieces, one pass each (:func:`sweep_baseline`, then :func:`sweep_piece` per piece, :func:`sweep_result` at
any point), so a caller can stop between two and keep what is done; its time is predicted from a pass timed on this
machine at the text's own length, never from a constant.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
from torch import Tensor

from attnviz.core.progress import Progress, or_none
from attnviz.core.time_agreement import TimeLog, cpu_share
from attnviz.core.token_display import visible_text
from attnviz.core.tokenizer import Token
from attnviz.i18n.message import msg
from attnviz.labs.head_specs import SHOWN_SPEC_CHARS, check_heads, parse_heads, read_heads, shown_spec
from attnviz.labs.reductions import (
    REDUCE_POSITIONS,
    TOP_K,
    HeadReduction,
    Reduction,
    cosine_distance,
    head_reduction,
    kl_divergence,
    kl_rows,
    kl_through_head,
    next_token_losses,
    reduction_of,
    top_tokens,
)
from attnviz.models.ablation import ABLATION_MODES, Head, check_mode
from attnviz.models.resume import CachedLayers
from attnviz.models.source import AblatedOutputs, AttentionSource, ReadsHead, Resumes
from attnviz.settings import ABLATION_TOKENS, SWEEP_TOKENS

PASS_BYTES = 256 * 2**20  # the outputs one batched pass of the sweep may hold: R x T x vocab x 4 B
PASS_ROWS = 16  # and at most this many ablations a pass (an encoder's narrow outputs would allow hundreds)
CHANGED_K = 5  # the positions that change most, listed
PASS_SECONDS = 2.0  # a sweep's pass ablates fewer rows when one row takes long: a Stop waits for one pass at most
BATCHED_TOKENS = 256  # ... but never fewer than this many tokens a pass: a short row's time is mostly fixed cost
RANKED_K = 10  # the heads listed by effect under the sweep's map


def _mean(values: Tensor) -> float | None:
    return float(values.mean()) if values.numel() else None


@dataclass(frozen=True)
class AblationResult:
    """One ablation's effect on one text.

    heads: the (layer, head) pairs ablated; logits: whether the source has an LM head (else hidden states were
    compared); change: per position, KL(before ‖ after) (LM) or the cosine distance of the last hidden states;
    loss_before/loss_after/kl_mean: None for an encoder or a single token; top_before/top_after: per position,
    the TOP_K next tokens as (text, probability) (empty for an encoder).
    """

    model: str
    tokens: list[Token]
    n_input_tokens: int
    heads: list[Head]
    mode: str
    logits: bool
    loss_before: float | None
    loss_after: float | None
    kl_mean: float | None
    change: list[float]
    hidden_change: float | None
    top_before: list[list[tuple[str, float]]] = field(default_factory=list)
    top_after: list[list[tuple[str, float]]] = field(default_factory=list)

    @property
    def truncated(self) -> bool:
        return self.n_input_tokens > len(self.tokens)

    def changed_most(self, k: int = CHANGED_K) -> list[tuple[int, float]]:
        """The k positions whose output changed most: (position, change), largest first (ties: earlier first)."""
        order = sorted(range(len(self.change)), key=lambda p: (-self.change[p], p))
        return [(p, self.change[p]) for p in order[:k]]

    def to_json(self) -> dict:
        """The ``ablate --json`` object (see the CLI): the issue's keys, plus ``changed_most``."""
        last = len(self.tokens) - 1
        return {
            "model": self.model,
            "tokens": [t.text for t in self.tokens],
            "n_input_tokens": self.n_input_tokens,
            "truncated": self.truncated,
            "heads": [[layer, head] for layer, head in self.heads],
            "mode": self.mode,
            "loss_before": _rounded(self.loss_before),
            "loss_after": _rounded(self.loss_after),
            "kl_mean": _rounded(self.kl_mean),
            # positions 0 .. T-2, kl_mean's (the last position's KL is on the page, its next token is not in the text)
            "kl_per_position": [_rounded(v) for v in self.change[:-1]] if self.logits else None,
            "top_before": [[text, _rounded(p)] for text, p in self.top_before[last]] if self.logits else None,
            "top_after": [[text, _rounded(p)] for text, p in self.top_after[last]] if self.logits else None,
            "hidden_change": _rounded(self.hidden_change),
            "hidden_change_per_position": None if self.logits else [_rounded(v) for v in self.change],
            "changed_most": [[p, self.tokens[p].text, _rounded(v)] for p, v in self.changed_most()],
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else round(float(value), 8)


def token_limit(max_tokens: int, limit: int = ABLATION_TOKENS) -> int:
    """The tokens an ablation reads: the sidebar's (or --max-tokens) cut to this lab's own ``limit``."""
    return max(1, min(max_tokens, limit))


def _baseline(source: AttentionSource, text: str, n_tokens: int, mode: str) -> AblatedOutputs:
    if mode not in source.ablation_modes:
        raise ValueError(msg("ablation_lib.unsupported", name=source.name, mode=mode))
    if not source.encode(text, n_tokens).tokens:
        raise ValueError(msg("ablation_lib.no_tokens"))
    return source.ablated_outputs(text, n_tokens, [[]], mode)


def _texts(source: AttentionSource, ids: Tensor, probs: Tensor) -> list[list[tuple[str, float]]]:
    """ids and probabilities (T, k) as (text, probability) per position, each distinct id decoded once, its invisible
    characters made visible."""
    unique = sorted({int(i) for i in ids.flatten()})
    text = dict(zip(unique, map(visible_text, source.token_texts(unique)), strict=True))  # U+202E shown, not obeyed
    return [
        [(text[int(i)], float(p)) for i, p in zip(row_ids, row_probs, strict=True)]
        for row_ids, row_probs in zip(ids, probs, strict=True)
    ]


def ablation_effect(
    source: AttentionSource, text: str, max_tokens: int, heads: Sequence[Head], mode: str = "zero"
) -> AblationResult:
    """The effect of ablating ``heads`` together by ``mode`` on ``text``, cut to min(max_tokens, ABLATION_TOKENS).

    Two passes of the source's ablation code, one ablating nothing: so an empty ``heads`` gives exactly 0.
    ValueError for an empty text, an unknown head or mode, or a source that cannot ablate."""
    check_mode(mode)
    heads = check_heads(heads, source.n_layer, source.n_head)
    n_tokens = token_limit(max_tokens)
    before = _baseline(source, text, n_tokens, mode)
    if any(layer >= before.layers_run for layer, _ in heads):
        raise ValueError(msg("ablation_lib.layer_not_run", name=source.name, layer=max(heads)[0], n=before.layers_run))
    after = source.ablated_outputs(text, n_tokens, [heads], mode)
    b, a = before.values[0], after.values[0]  # (T, vocab) or (T, d_model)
    encoding = before.encoding
    common = {
        "model": source.name,
        "tokens": encoding.tokens,
        "n_input_tokens": encoding.n_input,
        "heads": heads,
        "mode": mode,
        "logits": before.logits,
    }
    if not before.logits:
        change = cosine_distance(b, a)  # (T,)
        return AblationResult(
            **common,
            loss_before=None,
            loss_after=None,
            kl_mean=None,
            change=change.tolist(),
            hidden_change=_mean(change),
        )
    ids = encoding.ids or []
    kl, losses, tops = [], ([], []), ([], [])
    for start in range(0, b.shape[0], REDUCE_POSITIONS):  # a few (positions, vocab) float64 temporaries at a time
        end = min(b.shape[0], start + REDUCE_POSITIONS)
        kl.append(kl_divergence(b[start:end], a[start:end]))
        for side, logits in enumerate((b, a)):
            losses[side].append(next_token_losses(logits[start : end + 1], ids[start : end + 1]))
            tops[side].append(top_tokens(logits[start:end]))
    kl = torch.cat(kl)  # (T,)
    before_top, after_top = (tuple(torch.cat(part) for part in zip(*top, strict=True)) for top in tops)
    return AblationResult(
        **common,
        loss_before=_mean(torch.cat(losses[0])),
        loss_after=_mean(torch.cat(losses[1])),
        kl_mean=_mean(kl[:-1]),
        change=kl.tolist(),
        hidden_change=None,
        top_before=_texts(source, *before_top),
        top_after=_texts(source, *after_top),
    )


@dataclass(frozen=True)
class AblationSweep:
    """Every head ablated alone, or those done before a stop: values[layer][head] is its kl_mean (LM) or
    hidden_change (encoder), None where undefined (a single token has no next-token positions to average) or not
    run; done[layer][head] says which ran. measure: "kl_mean" or "hidden_change"."""

    model: str
    mode: str
    n_tokens: int
    measure: str
    values: list[list[float | None]]
    rows_per_pass: int
    done: list[list[bool]] = field(default_factory=list)
    loss_change: list[list[float | None]] = field(default_factory=list)  # an LM's mean loss after - before, per head
    resumed: str | None = None  # None: each pass started at its heads' layer; else why each ran the whole forward

    @property
    def n_heads(self) -> int:
        return sum(len(row) for row in self.values)

    @property
    def n_done(self) -> int:
        return sum(map(sum, self.done)) if self.done else self.n_heads

    @property
    def complete(self) -> bool:
        return self.n_done == self.n_heads

    def ranked(self, k: int = RANKED_K) -> list[tuple[int, int, float]]:
        """The k heads whose ablation changed the output most: (layer, head, effect), largest first (ties: the
        earlier head first); heads not run or without a value are left out."""
        found = [
            (layer, head, v) for layer, row in enumerate(self.values) for head, v in enumerate(row) if v is not None
        ]
        return sorted(found, key=lambda item: (-item[2], item[0], item[1]))[:k]

    def to_json(self) -> list[list[float | None]]:
        return [[_rounded(v) for v in row] for row in self.values]


def rows_per_pass(n_tokens: int, width: int, limit: int = PASS_BYTES) -> int:
    """How many ablations one batched pass holds: within ``limit`` bytes of outputs (n_tokens x width x 4 B each),
    and at most PASS_ROWS."""
    return max(1, min(PASS_ROWS, limit // max(1, n_tokens * width * 4)))


def sweep_bytes(source: AttentionSource, n_tokens: int) -> int:
    """A predicted peak for the sweep: a pass's outputs, its float64 reductions beside them, and the baseline's."""
    vocab_chunk = 4 * REDUCE_POSITIONS * 8 * 65536  # log_p, p, log_q and their product, 128 positions, float64
    layers = 4 * max(1, n_tokens) * source.d_model * source.n_layer * 8  # activations; the layers' cached outputs
    return 3 * PASS_BYTES + vocab_chunk + 2 * layers  # a pass, the baseline's p beside its logits


@dataclass(frozen=True, eq=False)
class SweepBaseline:
    """What every head of a sweep is compared with, the pieces it runs in, and a pass's time on this machine.

    values: (T, width) float32, the text's outputs with nothing ablated (next-token logits or last hidden states);
    heads: every head the sweep ablates, in order; rows: ablations a pass (one piece); pass_seconds: one full pass
    here, timed at this text's length when :func:`sweep_baseline` ran (``timed_rows`` rows measured, scaled by
    rows when fewer); first: the first piece's values when the timing ran it.
    """

    model: str
    mode: str
    n_head: int
    max_tokens: int
    values: Tensor
    logits: bool
    layers_run: int
    heads: list[Head]
    rows: int
    pass_seconds: float
    timed_rows: int
    first: dict[Head, float | None] = field(default_factory=dict)
    resume: CachedLayers | None = None
    resume_note: str | None = None
    loss_before: float | None = None
    ids: tuple[int, ...] = ()
    first_losses: dict[Head, float | None] = field(default_factory=dict)
    last_seconds: float | None = None  # resumed: a pass of ``rows`` heads of the last layer, timed here
    max_rows: int = 0  # the most rows a pass's outputs may hold (PASS_BYTES); 0: ``rows``
    reduction: Reduction | None = None  # an LM's baseline distributions, computed once for every pass
    through_head: HeadReduction | None = None  # a ReadsHead source's: each pass keeps what its LM head reads
    timed_share: float | None = None  # CPU seconds a second while it was timed: what the time taken is read against

    @property
    def n_tokens(self) -> int:
        """The tokens the text was read as (at most ``max_tokens``, what each pass is given)."""
        return int(self.values.shape[0])

    @property
    def nbytes(self) -> int:
        """What it holds: the baseline's outputs, its distributions (an LM) and the layers' cached outputs."""
        held = self.values.numel() * self.values.element_size()
        held += self.reduction.nbytes if self.reduction is not None else 0
        held += self.through_head.nbytes if self.through_head is not None else 0
        return int(held + (self.resume.nbytes if self.resume is not None else 0))

    @property
    def pass_bytes(self) -> int:
        """A pass's peak beside the baseline: its (rows, T, width) float32 outputs and the float64 temporaries of
        one chunk of positions (log p, p, log q and their product)."""
        if self.through_head is not None:
            return self.through_head.pass_bytes(max(self.rows, self.max_rows))
        T, width = self.values.shape
        return 4 * max(self.rows, self.max_rows) * T * width + 4 * 8 * min(T, REDUCE_POSITIONS) * width

    def row_seconds(self, layer: int) -> float:
        """A row's predicted time in a pass from ``layer``'s heads: ``pass_seconds`` from the first layer,
        ``last_seconds`` from the last (both timed here at ``rows`` rows), in between in proportion to the layers
        it runs."""
        seconds = self.pass_seconds
        if self.resume is not None and self.last_seconds is not None:
            last = self.resume.start_for(self.layers_run - 1)
            share = self.resume.start_for(layer) / max(1, last)
            seconds = self.pass_seconds - (self.pass_seconds - self.last_seconds) * share
        return seconds / self.rows

    def rows_at(self, layer: int) -> int:
        """Rows a pass from ``layer`` holds: ``rows``, or more when resumed passes from later layers are quicker,
        as many as fit PASS_SECONDS (a Stop waits for one pass) and ``max_rows`` (its outputs' bytes)."""
        if self.resume is None or self.last_seconds is None:
            return self.rows
        by_time = int(PASS_SECONDS / max(1e-9, self.row_seconds(layer)))
        return max(self.rows, min(self.max_rows or self.rows, by_time))

    def pieces(self, done: Mapping[Head, object] | None = None) -> list[list[Head]]:
        """The heads not in ``done``, in order, a piece (one batched pass) each :meth:`rows_at` its first head's
        layer."""
        left = [head for head in self.heads if head not in (done or {})]
        found, start = [], 0
        while start < len(left):
            size = self.rows_at(left[start][0])
            found.append(left[start : start + size])
            start += size
        return found

    def piece_seconds(self, piece: Sequence[Head]) -> float:
        """A piece's predicted time: a row's from its first head's layer, times its rows (more rows a pass cost a
        little less a row: the prediction errs long)."""
        return self.row_seconds(min(layer for layer, _ in piece)) * len(piece) if piece else 0.0

    def seconds(self, done: Mapping[Head, object] | None = None) -> float:
        """The predicted time of the pieces left after ``done``."""
        return sum(self.piece_seconds(piece) for piece in self.pieces(done))


def sweep_baseline(
    source: AttentionSource,
    text: str,
    max_tokens: int,
    mode: str = "zero",
    limit: int = PASS_BYTES,
    clock: Callable[[], float] = time.perf_counter,
    resume: bool = True,
    timed: bool = True,
) -> SweepBaseline:
    """The sweep's first steps on ``text`` cut to min(max_tokens, SWEEP_TOKENS), timed on this machine.

    The baseline pass (nothing ablated; after an untimed pass of one token, and run twice unless it took over
    PASS_SECONDS, the faster taken: a process's first passes carry one-time costs; when resumed, the layer cache's
    pass and its check from the middle layer, timed together) sets the rows of a pass: as many
    as ``limit`` bytes of outputs allow (at most PASS_ROWS), fewer when one row takes so long that a pass would
    pass PASS_SECONDS (a Stop waits for the pass under way), unless the pass stays within BATCHED_TOKENS tokens
    (rows x T), where rows add little to a pass's fixed cost.
    Then the first piece, whose time is a pass's: rows cost less together than alone (a pass's fixed cost, and
    batched matrix products), so one row's time x rows would overstate the rest, by 2 to 4 times on short texts.

    ``timed=False``: one baseline pass and no piece timed (a few heads confirmed, :func:`confirm_heads`).
    ``resume`` (default): each pass starts at the layer of its earliest head, from the layers' outputs cached once
    (:meth:`~attnviz.models.source.Resumes.layer_cache`), where the source can; ``False``: every pass runs whole.

    ValueError for an empty text or a mode the source cannot run."""
    check_mode(mode)
    n_tokens = token_limit(max_tokens, SWEEP_TOKENS)
    if timed:
        _baseline(source, text, 1, mode)  # one token, untimed: a model's first pass pays for lazy set-up, not tokens
    timing_started = (clock(), time.process_time())
    timings, cache, note = [], None, None
    if resume and isinstance(source, Resumes):  # its baseline pass, timed, and a check pass from the middle layer
        start = clock()
        before, cache = source.layer_cache(text, n_tokens, mode)
        timings.append(max(1e-9, clock() - start) / 2)  # a pass of one row, and one of two rows from halfway
        cache, note = (None, cache) if isinstance(cache, str) else (cache, None)
    elif resume:
        note = "its source runs every pass whole"
    for _ in range(2 if timed and not timings else 1 if not timings else 0):
        start = clock()
        before = _baseline(source, text, n_tokens, mode)
        timings.append(max(1e-9, clock() - start))
        if timings[0] > PASS_SECONDS:
            break
    one_row = min(timings)
    base = before.values[0]  # (T, width)
    T, width = base.shape
    by_time = max(int(PASS_SECONDS / one_row), BATCHED_TOKENS // T)  # short rows batch almost free: keep them
    rows = max(1, min(rows_per_pass(T, width, limit), by_time))
    heads = [(layer, head) for layer in range(before.layers_run) for head in range(source.n_head)]
    baseline = SweepBaseline(
        model=source.name,
        mode=mode,
        n_head=source.n_head,
        max_tokens=n_tokens,
        values=base,
        logits=before.logits,
        layers_run=before.layers_run,
        heads=heads,
        rows=rows,
        max_rows=rows_per_pass(T, width, limit),
        pass_seconds=one_row * rows,
        timed_rows=1,
        resume=cache,
        resume_note=note,
        loss_before=_mean(next_token_losses(base, before.encoding.ids)) if before.logits and T > 1 else None,
        ids=tuple(before.encoding.ids or ()),
        reduction=reduction_of(base) if before.logits else None,
    )
    head = source.unembedding() if before.logits and isinstance(source, ReadsHead) else None
    if head is not None and baseline.reduction is not None:  # a pass's outputs: (rows, T, d), no logits held
        through = head_reduction(baseline.reduction, *head)
        max_rows = max(rows_per_pass(T, through.row_width, limit), baseline.max_rows)
        baseline = dataclasses.replace(baseline, through_head=through, max_rows=max_rows)
    if not heads or not timed:
        return baseline
    scores: dict[Head, float | None] = {}
    losses: dict[Head, float | None] = {}
    first, seconds = heads[:rows], baseline.pass_seconds
    if rows > 1:  # one row is a pass: timed already
        start = clock()
        scores.update(sweep_piece(source, text, baseline, first, losses))
        seconds = max(1e-9, clock() - start) * rows / len(first)  # a pass of ``rows`` rows
    last_seconds = None
    # the last layer's heads, up to a layer's and what a pass holds: later passes hold more rows than the first, and
    # a row costs less in a bigger batch, so the time from the last layer is measured near that size (a row from
    # there costs at most a whole one: the pass stays within twice PASS_SECONDS)
    k = max(rows, min(source.n_head, baseline.max_rows, int(2 * PASS_SECONDS / one_row)))
    final = [head for head in heads[-k:] if head not in scores]
    if cache is not None and final and final[0][0] > first[-1][0]:  # resumed: a pass from the last layer, timed
        start = clock()
        scores.update(sweep_piece(source, text, baseline, final, losses))
        last_seconds = max(1e-9, clock() - start) * rows / len(final)
    return dataclasses.replace(
        baseline,
        pass_seconds=seconds,
        last_seconds=last_seconds,
        timed_rows=len(first) if rows > 1 else 1,
        first=scores,
        first_losses=losses,
        timed_share=cpu_share(clock() - timing_started[0], time.process_time() - timing_started[1]),
    )


def sweep_piece(
    source: AttentionSource,
    text: str,
    baseline: SweepBaseline,
    heads: Sequence[Head],
    losses: dict[Head, float | None] | None = None,
) -> dict:
    """One batched pass of the sweep: each of ``heads`` ablated alone (a row each), reduced to its kl_mean or
    hidden_change in float64 before anything else runs: {head: value}. ``losses``: filled with an LM's change of
    the mean next-token loss (after − before) for each head."""
    rows = [[head] for head in heads]
    options = {} if baseline.resume is None else {"resume": baseline.resume}
    if baseline.through_head is not None:
        options["head_reads"] = True
    after = source.ablated_outputs(text, baseline.max_tokens, rows, baseline.mode, **options).values
    if baseline.logits:
        if baseline.through_head is not None:  # (R, T, d): what the LM head read; its logits formed block by block
            kl, after_losses = kl_through_head(after, baseline.through_head, ids=baseline.ids)
        else:  # (R, T, vocab)
            kl, after_losses = kl_rows(baseline.values, after, ids=baseline.ids, reduction=baseline.reduction)
        scores = [_mean(row[:-1]) for row in kl]
        if losses is not None and baseline.loss_before is not None:
            losses.update(
                {head: _mean(row) - baseline.loss_before for head, row in zip(heads, after_losses, strict=True)}
            )
    else:  # (R, T, d_model)
        scores = [_mean(cosine_distance(baseline.values, row)) for row in after]
    return dict(zip(heads, scores, strict=True))


def sweep_result(
    baseline: SweepBaseline, values: Mapping[Head, float | None], losses: Mapping[Head, float | None] | None = None
) -> AblationSweep:
    """The layer x head map of the heads in ``values`` (every one, or those done before a stop); ``losses``: each
    head's change of an LM's mean loss, where kept."""
    layers, n_head = range(baseline.layers_run), range(baseline.n_head)
    losses = {**baseline.first_losses, **(losses or {})}
    return AblationSweep(
        model=baseline.model,
        mode=baseline.mode,
        n_tokens=baseline.n_tokens,
        measure="kl_mean" if baseline.logits else "hidden_change",
        values=[[values.get((layer, head)) for head in n_head] for layer in layers],
        rows_per_pass=baseline.rows,
        done=[[(layer, head) in values for head in n_head] for layer in layers],
        loss_change=[[losses.get((layer, head)) for head in n_head] for layer in layers] if losses else [],
        resumed=baseline.resume_note,
    )


def run_pieces(
    source: AttentionSource,
    text: str,
    baseline: SweepBaseline,
    values: dict[Head, float | None],
    progress: Progress | None = None,
    losses: dict[Head, float | None] | None = None,
    log: TimeLog | None = None,
) -> dict[Head, float | None]:
    """The pieces left after ``values`` (which this fills in as each pass ends, so an interrupted run keeps what
    it did); ``progress``: a stage of every head, those done (timed first, or before a stop) counted as done, a
    step per head priced at its pass's price; ``losses``: filled as :func:`sweep_piece` fills it; ``log``: a lap
    per pass, its predicted time beside what it took."""
    values.update({head: v for head, v in baseline.first.items() if head not in values})
    pieces = baseline.pieces(values)
    progress = or_none(progress)
    left = sum(map(len, pieces))
    prices = [baseline.piece_seconds(piece) / len(piece) for piece in pieces for _ in piece]
    progress.stage("ablation_lib.progress_heads", len(baseline.heads), done=len(baseline.heads) - left, prices=prices)
    for piece in pieces:
        first = min(layer for layer, _ in piece)
        with nullcontext() if log is None else log.part(first, baseline.piece_seconds(piece)):
            values.update(sweep_piece(source, text, baseline, piece, losses))
        progress.step(len(piece))
    return values


def confirm_heads(
    source: AttentionSource, text: str, max_tokens: int, mode: str, heads: Sequence[Head]
) -> AblationSweep:
    """Each of ``heads`` ablated alone, exactly, as the sweep runs them (an estimate's top heads confirmed): the
    layer x head map with only those heads, their loss change kept (an LM)."""
    baseline = sweep_baseline(source, text, max_tokens, mode, timed=False)
    baseline = dataclasses.replace(baseline, heads=[(int(layer), int(head)) for layer, head in heads])
    losses: dict[Head, float | None] = {}
    return sweep_result(baseline, run_pieces(source, text, baseline, {}, None, losses), losses)


def ablation_sweep(
    source: AttentionSource,
    text: str,
    max_tokens: int,
    mode: str = "zero",
    progress: Progress | None = None,
    limit: int = PASS_BYTES,
) -> AblationSweep:
    """Every head ablated alone by ``mode`` on ``text`` cut to min(max_tokens, SWEEP_TOKENS): a layer x head map.

    Batched: each pass ablates a different head in each of its rows, as many rows as ``limit`` bytes of outputs
    allow; each pass is reduced to one number a row before the next. ``progress``: a step per head."""
    baseline = sweep_baseline(source, text, max_tokens, mode, limit)
    losses: dict[Head, float | None] = {}
    return sweep_result(baseline, run_pieces(source, text, baseline, {}, progress, losses), losses)


__all__ = [
    "ABLATION_MODES",
    "ABLATION_TOKENS",
    "REDUCE_POSITIONS",
    "SHOWN_SPEC_CHARS",
    "SWEEP_TOKENS",
    "TOP_K",
    "AblationResult",
    "AblationSweep",
    "SweepBaseline",
    "ablation_effect",
    "ablation_sweep",
    "check_heads",
    "cosine_distance",
    "kl_divergence",
    "kl_rows",
    "next_token_losses",
    "parse_heads",
    "read_heads",
    "reduction_of",
    "run_pieces",
    "shown_spec",
    "sweep_baseline",
    "sweep_piece",
    "sweep_result",
    "top_tokens",
]

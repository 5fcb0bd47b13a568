"""Head ablation: knock heads out and measure what the model's output loses; here, every head alone (the sweep).

Attention weights say where a head looks; ablating it says whether it matters. The source runs the text with some
heads' slice of the output projection's input rewritten (:mod:`attnviz.models.ablation`: ``zero``, ``mean`` over
the positions, or ``first``, the head attending only to the first token) and the lab compares the outputs:

- a model with an LM head: the mean next-token cross-entropy (nats) of predicting token t + 1 from positions
  0 … T − 2, before and after; KL(p_before ‖ p_after) of the next-token distribution at every position (nats),
  its mean over the same positions; the top tokens before and after at each position;
- an encoder (or the embedded model, which has no LM head): the cosine distance of the last hidden states at each
  position, and its mean (``hidden_change``).

Log-softmax, losses, KL and cosine distances are reduced in float64 whatever the model ran in: over a
49,152-token vocabulary float32 is 1e-6 to 1e-4 off, as large as the effect of a weak head.

Some heads ablated together on one text are :mod:`attnviz.labs.heads_matter.effect`'s (:func:`ablation_effect`
there). The single-head sweep ablates every head alone, several heads per batched pass (row r ablates its own head),
reducing each pass's outputs to one number a head as it goes; a pass holds at most :data:`PASS_BYTES` of outputs and
takes about :data:`~attnviz.labs.heads_matter.schedule.PASS_SECONDS` here. It runs in pieces
(:mod:`attnviz.labs.heads_matter.schedule`), one pass each (:func:`sweep_baseline`, then :func:`sweep_piece` per
piece, :func:`sweep_result` at any point), so a caller can stop between two and keep what is done; its time is
predicted from a pass timed on this machine at the text's own length, never from a constant.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from torch import Tensor

from attnviz.core.admission import Need
from attnviz.core.progress import Progress
from attnviz.core.time_agreement import TimeLog, cpu_share
from attnviz.labs.heads_matter import schedule
from attnviz.labs.heads_matter.common import (
    PASS_BYTES,
    PASS_ROWS,
    Head,
    lab_need,
    mean_or_none,
    rounded,
    rows_per_pass,
    token_limit,
)
from attnviz.labs.heads_matter.effect import unablated_outputs
from attnviz.labs.heads_matter.reductions import (
    REDUCE_POSITIONS,
    HeadReduction,
    Reduction,
    cosine_distance,
    head_reduction,
    kl_rows,
    kl_through_head,
    next_token_losses,
    reduction_of,
)
from attnviz.models.ablation import check_mode
from attnviz.models.resume import CachedLayers
from attnviz.models.source import AttentionSource, ReadsHead, Resumes
from attnviz.settings import SWEEP_TOKENS

RANKED_K = 10  # the heads listed by effect under the sweep's map


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
        return [[rounded(v) for v in row] for row in self.values]


def sweep_bytes(source: AttentionSource, n_tokens: int) -> int:
    """A predicted peak for the sweep: a pass's outputs, its float64 reductions beside them, and the baseline's."""
    vocab_chunk = 4 * REDUCE_POSITIONS * 8 * 65536  # log_p, p, log_q and their product, 128 positions, float64
    layers = 4 * max(1, n_tokens) * source.d_model * source.n_layer * 8  # activations; the layers' cached outputs
    return 3 * PASS_BYTES + vocab_chunk + 2 * layers  # a pass, the baseline's p beside its logits


def sweep_need(source: AttentionSource, n_tokens: int) -> Need:
    """The sweep's timing (:func:`sweep_baseline`) or a click's top heads (:func:`confirm_heads`), priced on
    ``source``'s device: :func:`sweep_bytes`; the unablated pass and a pass of at most PASS_ROWS rows from the first
    layer and from the last (:func:`attnviz.labs.heads_matter.common.lab_need`)."""
    return lab_need(source, sweep_bytes(source, n_tokens), n_tokens, 1 + 2 * PASS_ROWS)


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

    def need(self, source: AttentionSource, seconds: float) -> Need:
        """The passes left, priced on ``source``'s device: a pass's peak beside the baseline (:attr:`pass_bytes`),
        and ``seconds``, what they are quoted (:meth:`seconds`, scaled by the machine now)."""
        return lab_need(source, self.pass_bytes, self.n_tokens, 0.0, seconds)

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
        by_time = int(schedule.PASS_SECONDS / max(1e-9, self.row_seconds(layer)))
        return max(self.rows, min(self.max_rows or self.rows, by_time))

    def pieces(self, done: Mapping[Head, object] | None = None) -> list[list[Head]]:
        """The heads not in ``done``, in order, a piece (one batched pass) each :meth:`rows_at` its first head's
        layer."""
        left = [head for head in self.heads if head not in (done or {})]
        return schedule.cut_pieces(left, lambda head: self.rows_at(head[0]))

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
        unablated_outputs(
            source, text, 1, mode
        )  # one token, untimed: a model's first pass pays for lazy set-up, not tokens
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
        before = unablated_outputs(source, text, n_tokens, mode)
        timings.append(max(1e-9, clock() - start))
        if timings[0] > schedule.PASS_SECONDS:
            break
    one_row = min(timings)
    base = before.values[0]  # (T, width)
    T, width = base.shape
    # short rows batch almost free: keep them
    by_time = max(int(schedule.PASS_SECONDS / one_row), schedule.BATCHED_TOKENS // T)
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
        loss_before=mean_or_none(next_token_losses(base, before.encoding.ids)) if before.logits and T > 1 else None,
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
    k = max(rows, min(source.n_head, baseline.max_rows, int(2 * schedule.PASS_SECONDS / one_row)))
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
        scores = [mean_or_none(row[:-1]) for row in kl]
        if losses is not None and baseline.loss_before is not None:
            losses.update(
                {head: mean_or_none(row) - baseline.loss_before for head, row in zip(heads, after_losses, strict=True)}
            )
    else:  # (R, T, d_model)
        scores = [mean_or_none(cosine_distance(baseline.values, row)) for row in after]
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
    schedule.run_passes(
        baseline.pieces(values),
        lambda piece: values.update(sweep_piece(source, text, baseline, piece, losses)),
        progress,
        "ablation_lib.progress_heads",
        len(baseline.heads),
        baseline.piece_seconds,
        log,
    )
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

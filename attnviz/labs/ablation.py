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
from dataclasses import dataclass, field

import torch
from torch import Tensor

from attnviz.core.progress import Progress, or_none
from attnviz.core.token_display import visible_text
from attnviz.core.tokenizer import Token
from attnviz.core.typed_numbers import ascii_digits
from attnviz.i18n.message import msg
from attnviz.models.ablation import ABLATION_MODES, Head, check_mode
from attnviz.models.source import AblatedOutputs, AttentionSource
from attnviz.settings import ABLATION_TOKENS, SWEEP_TOKENS

PASS_BYTES = 256 * 2**20  # the outputs one batched pass of the sweep may hold: R x T x vocab x 4 B
PASS_ROWS = 16  # and at most this many ablations a pass (an encoder's narrow outputs would allow hundreds)
TOP_K = 5  # the top next tokens shown before and after
CHANGED_K = 5  # the positions that change most, listed
REDUCE_POSITIONS = 128  # positions reduced at a time: a few (128, vocab) float64 temporaries (50 MB for 49,152)
PASS_SECONDS = 2.0  # a sweep's pass ablates fewer rows when one row takes long: a Stop waits for one pass at most
BATCHED_TOKENS = 256  # ... but never fewer than this many tokens a pass: a short row's time is mostly fixed cost
RANKED_K = 10  # the heads listed by effect under the sweep's map
HEAD_SPEC_DIGITS = 6  # a layer or head number longer than this is refused before int() reads it
SHOWN_SPEC_CHARS = 24  # what a message quotes of a malformed spec


def shown_spec(text: str, limit: int = SHOWN_SPEC_CHARS) -> str:
    """``text`` for a one-line message: as typed, or its first ``limit`` characters, "…" and its length."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def _head_number(text: str, item: str) -> int | None:
    """A layer or head number as typed, or None when it is not ASCII digits. ValueError for one with a leading zero
    ("0.01" is not head 1) or more than HEAD_SPEC_DIGITS digits (int() of 5,000 raises Python's own message)."""
    if not ascii_digits(text):
        return None
    if len(text) > HEAD_SPEC_DIGITS:
        raise ValueError(msg("ablation_lib.head_too_long", item=shown_spec(item), digits=HEAD_SPEC_DIGITS))
    if len(text) > 1 and text.startswith("0"):
        raise ValueError(msg("ablation_lib.leading_zero", item=shown_spec(item)))
    return int(text)


def read_heads(spec: str) -> list[tuple[int, int | None]]:
    """The syntax of ``"L.H,L.H"`` (``L.*``: every head of layer L, head None), before any model is known.

    ValueError naming the first item that is not LAYER.HEAD or LAYER.* (shortened past SHOWN_SPEC_CHARS)."""
    items = [item.strip() for item in spec.split(",")]
    if not spec.strip():
        raise ValueError(msg("ablation_lib.no_heads", spec=shown_spec(spec)))
    read = []
    for item in items:
        if not item:  # "0.1," or "0.1,,1.2": name what was typed, not the empty piece
            raise ValueError(msg("ablation_lib.bad_head", item=shown_spec(spec)))
        layer_text, dot, head_text = item.partition(".")
        layer = _head_number(layer_text, item)
        head = None if head_text == "*" else _head_number(head_text, item)
        if not dot or layer is None or (head is None and head_text != "*"):
            raise ValueError(msg("ablation_lib.bad_head", item=shown_spec(item)))
        read.append((layer, head))
    return read


def parse_heads(spec: str, n_layer: int, n_head: int) -> list[Head]:
    """``"L.H,L.H"`` (``L.*``: every head of layer L) -> [(layer, head), …], in order, without repeats.

    ValueError naming the item for one that is malformed or names a head the model does not have."""
    heads: list[Head] = []
    for layer, head in read_heads(spec):
        item = f"{layer}.{'*' if head is None else head}"
        if not 0 <= layer < n_layer or (head is not None and not 0 <= head < n_head):
            raise ValueError(msg("ablation_lib.head_range", item=item, last_layer=n_layer - 1, last_head=n_head - 1))
        for at in range(n_head) if head is None else [head]:
            if (layer, at) not in heads:
                heads.append((layer, at))
    return heads


def next_token_losses(logits: Tensor, ids: Sequence[int]) -> Tensor:
    """Cross-entropy (nats) of predicting token t + 1 from position t, in float64: logits (T, vocab) -> (T - 1,)."""
    targets = torch.as_tensor(list(ids[1:]), dtype=torch.long)  # (T - 1,)
    log_p = torch.log_softmax(logits[:-1].double(), dim=-1)  # (T - 1, vocab)
    return -log_p.gather(-1, targets[:, None])[:, 0]


def kl_divergence(before: Tensor, after: Tensor) -> Tensor:
    """KL(softmax(before) ‖ softmax(after)) in nats at each position, in float64: (..., vocab) -> (...).

    Equal logits give exactly 0; the rounding of nearly equal ones is clamped at 0 rather than read as negative."""
    log_p = torch.log_softmax(before.double(), dim=-1)
    log_q = torch.log_softmax(after.double(), dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(dim=-1).clamp_min(0.0)


def kl_rows(before: Tensor, after: Tensor, positions: int = REDUCE_POSITIONS) -> Tensor:
    """:func:`kl_divergence` of one baseline against R rows, ``positions`` at a time so that no (T, vocab) float64
    distribution is held: before (T, vocab), after (R, T, vocab) -> (R, T) float64."""
    out = torch.empty(after.shape[:2], dtype=torch.float64)  # (R, T)
    for start in range(0, before.shape[0], positions):
        end = min(before.shape[0], start + positions)
        log_p = torch.log_softmax(before[start:end].double(), dim=-1)  # (P, vocab), once for every row
        p = log_p.exp()
        for row in range(after.shape[0]):
            log_q = torch.log_softmax(after[row, start:end].double(), dim=-1)  # (P, vocab)
            out[row, start:end] = (p * (log_p - log_q)).sum(dim=-1).clamp_min(0.0)
    return out


def cosine_distance(before: Tensor, after: Tensor) -> Tensor:
    """1 − cos(before, after) at each position, in float64: (..., d) -> (...); two zero vectors are 0 apart."""
    before, after = before.double(), after.double()
    dot = (before * after).sum(dim=-1)
    norms = before.norm(dim=-1) * after.norm(dim=-1)
    cos = dot / norms.clamp_min(torch.finfo(torch.float64).tiny)
    distance = torch.where(norms > 0, (1.0 - cos).clamp_min(0.0), torch.ones_like(dot))
    return torch.where((before == after).all(dim=-1), torch.zeros_like(dot), distance)  # equal: exactly 0


def top_tokens(logits: Tensor, k: int = TOP_K) -> tuple[Tensor, Tensor]:
    """The k most likely next tokens at each position: logits (T, vocab) -> ids (T, k), probabilities (T, k)."""
    probs = torch.softmax(logits.double(), dim=-1)
    values, ids = probs.topk(min(k, probs.shape[-1]), dim=-1)
    return ids, values


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


def check_heads(heads: Sequence[Head], n_layer: int, n_head: int) -> list[Head]:
    """The heads as (layer, head) tuples; ValueError for one the model does not have."""
    checked = []
    for layer, head in heads:
        if not (0 <= layer < n_layer and 0 <= head < n_head):
            raise ValueError(
                msg("ablation_lib.head_range", item=f"{layer}.{head}", last_layer=n_layer - 1, last_head=n_head - 1)
            )
        checked.append((int(layer), int(head)))
    return checked


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
    return 2 * PASS_BYTES + vocab_chunk + 4 * max(1, n_tokens) * source.d_model * source.n_layer * 8


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

    @property
    def n_tokens(self) -> int:
        """The tokens the text was read as (at most ``max_tokens``, what each pass is given)."""
        return int(self.values.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.values.numel() * self.values.element_size())

    @property
    def pass_bytes(self) -> int:
        """A pass's peak beside the baseline: its (rows, T, width) float32 outputs and the float64 temporaries of
        one chunk of positions (log p, p, log q and their product)."""
        T, width = self.values.shape
        return 4 * self.rows * T * width + 4 * 8 * min(T, REDUCE_POSITIONS) * width

    def pieces(self, done: Mapping[Head, object] | None = None) -> list[list[Head]]:
        """The heads not in ``done``, a piece (one batched pass) each ``rows`` of them, in order."""
        left = [head for head in self.heads if head not in (done or {})]
        return [left[start : start + self.rows] for start in range(0, len(left), self.rows)]

    def seconds(self, done: Mapping[Head, object] | None = None) -> float:
        """The predicted time of the pieces left after ``done``: a pass costs ``pass_seconds``, a shorter last
        one its share by rows (the rows' work dominates once a pass is worth timing)."""
        return sum(self.pass_seconds * len(piece) / self.rows for piece in self.pieces(done))


def sweep_baseline(
    source: AttentionSource,
    text: str,
    max_tokens: int,
    mode: str = "zero",
    limit: int = PASS_BYTES,
    clock: Callable[[], float] = time.perf_counter,
) -> SweepBaseline:
    """The sweep's first steps on ``text`` cut to min(max_tokens, SWEEP_TOKENS), timed on this machine.

    The baseline pass (nothing ablated; after an untimed pass of one token, and run twice unless it took over
    PASS_SECONDS, the faster taken: a process's first passes carry one-time costs) sets the rows of a pass: as many
    as ``limit`` bytes of outputs allow (at most PASS_ROWS), fewer when one row takes so long that a pass would
    pass PASS_SECONDS (a Stop waits for the pass under way), unless the pass stays within BATCHED_TOKENS tokens
    (rows x T), where rows add little to a pass's fixed cost.
    Then the first piece, whose time is a pass's: rows cost less together than alone (a pass's fixed cost, and
    batched matrix products), so one row's time x rows would overstate the rest, by 2 to 4 times on short texts.

    ValueError for an empty text or a mode the source cannot run."""
    check_mode(mode)
    n_tokens = token_limit(max_tokens, SWEEP_TOKENS)
    _baseline(source, text, 1, mode)  # one token, untimed: a model's first pass pays for lazy set-up, not tokens
    timings = []
    for _ in range(2):
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
        pass_seconds=one_row * rows,
        timed_rows=1,
    )
    if rows == 1 or not heads:  # one row is a pass: timed already
        return baseline
    first = heads[:rows]
    start = clock()
    scores = sweep_piece(source, text, baseline, first)
    seconds = max(1e-9, clock() - start) * rows / len(first)  # a pass of ``rows`` rows
    return dataclasses.replace(baseline, pass_seconds=seconds, timed_rows=len(first), first=scores)


def sweep_piece(source: AttentionSource, text: str, baseline: SweepBaseline, heads: Sequence[Head]) -> dict:
    """One batched pass of the sweep: each of ``heads`` ablated alone (a row each), reduced to its kl_mean or
    hidden_change in float64 before anything else runs: {head: value}."""
    after = source.ablated_outputs(text, baseline.max_tokens, [[head] for head in heads], baseline.mode).values
    if baseline.logits:  # (R, T, vocab)
        scores = [_mean(row[:-1]) for row in kl_rows(baseline.values, after)]
    else:  # (R, T, d_model)
        scores = [_mean(cosine_distance(baseline.values, row)) for row in after]
    return dict(zip(heads, scores, strict=True))


def sweep_result(baseline: SweepBaseline, values: Mapping[Head, float | None]) -> AblationSweep:
    """The layer x head map of the heads in ``values`` (every one, or those done before a stop)."""
    layers, n_head = range(baseline.layers_run), range(baseline.n_head)
    return AblationSweep(
        model=baseline.model,
        mode=baseline.mode,
        n_tokens=baseline.n_tokens,
        measure="kl_mean" if baseline.logits else "hidden_change",
        values=[[values.get((layer, head)) for head in n_head] for layer in layers],
        rows_per_pass=baseline.rows,
        done=[[(layer, head) in values for head in n_head] for layer in layers],
    )


def run_pieces(
    source: AttentionSource,
    text: str,
    baseline: SweepBaseline,
    values: dict[Head, float | None],
    progress: Progress | None = None,
) -> dict[Head, float | None]:
    """The pieces left after ``values`` (which this fills in as each pass ends, so an interrupted run keeps what
    it did); ``progress``: a stage of the heads left, a step per head."""
    values.update({head: v for head, v in baseline.first.items() if head not in values})
    pieces = baseline.pieces(values)
    progress = or_none(progress)
    total = sum(map(len, pieces))
    if total == len(baseline.heads):
        progress.stage("ablation_lib.progress_heads", total)
    else:
        progress.stage("ablation_lib.progress_heads_left", total, n_done=len(values), n_heads=len(baseline.heads))
    for piece in pieces:
        values.update(sweep_piece(source, text, baseline, piece))
        progress.step(len(piece))
    return values


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
    return sweep_result(baseline, run_pieces(source, text, baseline, {}, progress))


__all__ = [
    "ABLATION_MODES",
    "ABLATION_TOKENS",
    "SWEEP_TOKENS",
    "AblationResult",
    "AblationSweep",
    "SweepBaseline",
    "ablation_effect",
    "ablation_sweep",
    "cosine_distance",
    "kl_divergence",
    "next_token_losses",
    "parse_heads",
    "run_pieces",
    "sweep_baseline",
    "sweep_piece",
    "sweep_result",
    "top_tokens",
]

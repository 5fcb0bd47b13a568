"""Head ablation: knock heads out and measure what the model's output loses.

Attention weights say where a head looks; ablating it says whether it matters. The source runs the text with some
heads' slice of the output projection's input rewritten (:mod:`attnviz.models.ablation`: ``zero``, ``mean`` over
the positions, or ``first``, the head attending only to the first token) and this lab compares the outputs:

- a model with an LM head: the mean next-token cross-entropy (nats) of predicting token t + 1 from positions
  0 … T − 2, before and after; KL(p_before ‖ p_after) of the next-token distribution at every position (nats),
  its mean over the same positions; the top tokens before and after at each position;
- an encoder (or the embedded model, which has no LM head): the cosine distance of the last hidden states at each
  position, and its mean (``hidden_change``).

Ablating nothing runs the same code and changes nothing: 0.0 exactly. The single-head sweep ablates every head
alone, several heads per batched pass (row r ablates its own head), reducing each pass's outputs to one number a
head as it goes; a pass holds at most :data:`PASS_BYTES` of outputs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from attnviz.core.progress import Progress, or_none
from attnviz.core.token_display import visible_text
from attnviz.core.tokenizer import Token
from attnviz.i18n.message import msg
from attnviz.models.ablation import ABLATION_MODES, Head, check_mode
from attnviz.models.source import AblatedOutputs, AttentionSource

ABLATION_TOKENS = 1024  # the most tokens one ablation reads: two passes, the logits at every position kept
SWEEP_TOKENS = 256  # the most tokens the single-head sweep reads: n_layer x n_head ablations
PASS_BYTES = 256 * 2**20  # the outputs one batched pass of the sweep may hold: R x T x vocab x 4 B
PASS_ROWS = 16  # and at most this many ablations a pass (an encoder's narrow outputs would allow hundreds)
TOP_K = 5  # the top next tokens shown before and after
CHANGED_K = 5  # the positions that change most, listed
REDUCE_POSITIONS = 256  # positions reduced at a time: a few (256, vocab) float32 temporaries (50 MB for 49,152)
SWEEP_FLOPS_PER_SECOND = 50e9  # benchmarks/ablation.py: SmolLM2, 256 tokens, 2 cores: 270 heads in 293 s (56e9)


def read_heads(spec: str) -> list[tuple[int, int | None]]:
    """The syntax of ``"L.H,L.H"`` (``L.*``: every head of layer L, head None), before any model is known.

    ValueError naming the first item that is not LAYER.HEAD or LAYER.*."""
    items = [item.strip() for item in spec.split(",")]
    if not spec.strip():
        raise ValueError(msg("ablation_lib.no_heads", spec=spec))
    read = []
    for item in items:
        if not item:  # "0.1," or "0.1,,1.2": name what was typed, not the empty piece
            raise ValueError(msg("ablation_lib.bad_head", item=spec))
        layer_text, dot, head_text = item.partition(".")
        digits = re.compile(r"[0-9]+")  # not str.isdigit: "²" is a digit to it, and int() refuses it
        if not dot or not digits.fullmatch(layer_text) or not (digits.fullmatch(head_text) or head_text == "*"):
            raise ValueError(msg("ablation_lib.bad_head", item=item))
        read.append((int(layer_text), None if head_text == "*" else int(head_text)))
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
    """Cross-entropy (nats) of predicting token t + 1 from position t: logits (T, vocab) -> (T - 1,)."""
    targets = torch.as_tensor(list(ids[1:]), dtype=torch.long)  # (T - 1,)
    log_p = torch.log_softmax(logits[:-1].float(), dim=-1)  # (T - 1, vocab)
    return -log_p.gather(-1, targets[:, None])[:, 0]


def kl_divergence(before: Tensor, after: Tensor) -> Tensor:
    """KL(softmax(before) ‖ softmax(after)) in nats at each position: (..., vocab) -> (...).

    Equal logits give exactly 0; the rounding of nearly equal ones is clamped at 0 rather than read as negative."""
    log_p = torch.log_softmax(before.float(), dim=-1)
    log_q = torch.log_softmax(after.float(), dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(dim=-1).clamp_min(0.0)


def cosine_distance(before: Tensor, after: Tensor) -> Tensor:
    """1 − cos(before, after) at each position: (..., d) -> (...); two zero vectors are 0 apart."""
    before, after = before.float(), after.float()
    dot = (before * after).sum(dim=-1)
    norms = before.norm(dim=-1) * after.norm(dim=-1)
    cos = dot / norms.clamp_min(torch.finfo(torch.float32).tiny)
    distance = torch.where(norms > 0, (1.0 - cos).clamp_min(0.0), torch.ones_like(dot))
    return torch.where((before == after).all(dim=-1), torch.zeros_like(dot), distance)  # equal: exactly 0


def top_tokens(logits: Tensor, k: int = TOP_K) -> tuple[Tensor, Tensor]:
    """The k most likely next tokens at each position: logits (T, vocab) -> ids (T, k), probabilities (T, k)."""
    probs = torch.softmax(logits.float(), dim=-1)
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
    for start in range(0, b.shape[0], REDUCE_POSITIONS):  # a few (positions, vocab) temporaries at a time
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
    """Every head ablated alone: values[layer][head] is its kl_mean (LM) or hidden_change (encoder), None where
    undefined (a single token has no next-token positions to average). measure: "kl_mean" or "hidden_change"."""

    model: str
    mode: str
    n_tokens: int
    measure: str
    values: list[list[float | None]]
    rows_per_pass: int

    def to_json(self) -> list[list[float | None]]:
        return [[_rounded(v) for v in row] for row in self.values]


def rows_per_pass(n_tokens: int, width: int, limit: int = PASS_BYTES) -> int:
    """How many ablations one batched pass holds: within ``limit`` bytes of outputs (n_tokens x width x 4 B each),
    and at most PASS_ROWS."""
    return max(1, min(PASS_ROWS, limit // max(1, n_tokens * width * 4)))


def sweep_seconds(source: AttentionSource, n_tokens: int) -> float:
    """A predicted time for the sweep: n_layer x n_head forward passes of n_tokens, each about
    2 x n_tokens x n_layer x 12 d_model² floating-point operations, at the rate benchmarks/ablation.py measured
    (SmolLM2 at 256 tokens on 2 CPU cores, its LM head's share included)."""
    flops = 2 * max(1, n_tokens) * source.n_layer * 12 * source.d_model**2
    return source.n_layer * source.n_head * flops / SWEEP_FLOPS_PER_SECOND


def sweep_bytes(source: AttentionSource, n_tokens: int) -> int:
    """A predicted peak for the sweep: a pass's outputs, its reductions beside them, and the baseline's."""
    return 5 * PASS_BYTES + 4 * max(1, n_tokens) * source.d_model * source.n_layer * 8  # logits, log-softmax, KL terms


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
    check_mode(mode)
    n_tokens = token_limit(max_tokens, SWEEP_TOKENS)
    before = _baseline(source, text, n_tokens, mode)
    base = before.values[0]  # (T, width)
    T, width = base.shape
    heads = [(layer, head) for layer in range(before.layers_run) for head in range(source.n_head)]
    per_pass = rows_per_pass(T, width, limit)
    progress = or_none(progress)
    progress.stage("ablation_lib.progress_heads", len(heads))
    values: dict[Head, float | None] = {}
    log_p = torch.log_softmax(base.float(), dim=-1) if before.logits else None  # (T, vocab)
    for start in range(0, len(heads), per_pass):
        chunk = heads[start : start + per_pass]
        after = source.ablated_outputs(text, n_tokens, [[head] for head in chunk], mode).values  # (R, T, width)
        if before.logits:
            log_q = torch.log_softmax(after, dim=-1)  # (R, T, vocab)
            kl = (log_p.exp() * (log_p - log_q)).sum(dim=-1).clamp_min(0.0)  # (R, T)
            del log_q
            scores = [_mean(row[:-1]) for row in kl]
        else:
            scores = [_mean(cosine_distance(base, row)) for row in after]
        del after
        values.update(zip(chunk, scores, strict=True))
        progress.step(len(chunk))
    grid = [[values[(layer, head)] for head in range(source.n_head)] for layer in range(before.layers_run)]
    return AblationSweep(
        model=source.name,
        mode=mode,
        n_tokens=T,
        measure="kl_mean" if before.logits else "hidden_change",
        values=grid,
        rows_per_pass=per_pass,
    )


__all__ = [
    "ABLATION_MODES",
    "ABLATION_TOKENS",
    "SWEEP_TOKENS",
    "AblationResult",
    "AblationSweep",
    "ablation_effect",
    "ablation_sweep",
    "cosine_distance",
    "kl_divergence",
    "next_token_losses",
    "parse_heads",
    "top_tokens",
]

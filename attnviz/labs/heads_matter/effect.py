"""One ablation's effect: some heads knocked out together, and what the model's output loses on one text.

Two passes of the source's ablation code (:mod:`attnviz.models.ablation`), one ablating nothing, so ablating nothing
changes nothing: 0.0 exactly. A model with an LM head is compared by next-token loss, KL and top tokens, reduced in
float64 a few positions at a time (:mod:`attnviz.labs.heads_matter.reductions`); an encoder by the cosine distance
of its last hidden states. The sweep (:mod:`attnviz.labs.heads_matter.ablation`) starts from
:func:`unablated_outputs` too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from attnviz.core.admission import Need
from attnviz.core.token_display import visible_text
from attnviz.core.tokenizer import Token
from attnviz.i18n.message import msg
from attnviz.labs.heads_matter.common import Head, lab_need, mean_or_none, rounded, token_limit
from attnviz.labs.heads_matter.head_specs import check_heads
from attnviz.labs.heads_matter.reductions import (
    REDUCE_POSITIONS,
    cosine_distance,
    kl_divergence,
    next_token_losses,
    top_tokens,
)
from attnviz.models.ablation import check_mode
from attnviz.models.source import AblatedOutputs, AttentionSource

CHANGED_K = 5  # the positions that change most, listed


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
            "loss_before": rounded(self.loss_before),
            "loss_after": rounded(self.loss_after),
            "kl_mean": rounded(self.kl_mean),
            # positions 0 .. T-2, kl_mean's (the last position's KL is on the page, its next token is not in the text)
            "kl_per_position": [rounded(v) for v in self.change[:-1]] if self.logits else None,
            "top_before": [[text, rounded(p)] for text, p in self.top_before[last]] if self.logits else None,
            "top_after": [[text, rounded(p)] for text, p in self.top_after[last]] if self.logits else None,
            "hidden_change": rounded(self.hidden_change),
            "hidden_change_per_position": None if self.logits else [rounded(v) for v in self.change],
            "changed_most": [[p, self.tokens[p].text, rounded(v)] for p, v in self.changed_most()],
        }


def unablated_outputs(source: AttentionSource, text: str, n_tokens: int, mode: str) -> AblatedOutputs:
    """The source's outputs on ``text`` (at most ``n_tokens``) with nothing ablated, through its ablation code.

    ValueError for a mode the source cannot run or a text of no tokens."""
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


def effect_need(source: AttentionSource, max_tokens: int) -> Need:
    """:func:`ablation_effect`'s price on ``source``'s device: its two passes' outputs ((T, vocab) or (T, d_model)
    float32 each, as a pass of the sweep holds them) beside a few positions' float64 temporaries, and its two passes
    (:func:`attnviz.labs.heads_matter.common.lab_need`)."""
    T = token_limit(max_tokens)
    vocab = getattr(getattr(source, "config", None), "vocab_size", 0) or 0
    width = max(vocab, source.d_model)
    return lab_need(source, 2 * 4 * T * width + 4 * 8 * min(T, REDUCE_POSITIONS) * width, T, 2.0)


def ablation_effect(
    source: AttentionSource, text: str, max_tokens: int, heads: Sequence[Head], mode: str = "zero"
) -> AblationResult:
    """The effect of ablating ``heads`` together by ``mode`` on ``text``, cut to min(max_tokens, ABLATION_TOKENS).

    Two passes of the source's ablation code, one ablating nothing: so an empty ``heads`` gives exactly 0.
    ValueError for an empty text, an unknown head or mode, or a source that cannot ablate."""
    check_mode(mode)
    heads = check_heads(heads, source.n_layer, source.n_head)
    n_tokens = token_limit(max_tokens)
    before = unablated_outputs(source, text, n_tokens, mode)
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
            hidden_change=mean_or_none(change),
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
        loss_before=mean_or_none(torch.cat(losses[0])),
        loss_after=mean_or_none(torch.cat(losses[1])),
        kl_mean=mean_or_none(kl[:-1]),
        change=kl.tolist(),
        hidden_change=None,
        top_before=_texts(source, *before_top),
        top_after=_texts(source, *after_top),
    )

"""Whether a model's weights look trained: one short pass on a fixed reference text, against what a model that
knows nothing does.

A page that ranks heads, names their roles, patches them or shows what the model wrote reads meaning into the
weights; on a randomly initialised checkpoint (``from_config`` then ``save_pretrained``) that meaning is noise. The
check is made once per loaded model (each source keeps it, :class:`ChecksWeights`) and reads:

- a model that predicts tokens (a decoder with its LM head, an encoder-decoder): its mean loss ``L`` on
  :data:`REFERENCE_TEXT` (the next token; an encoder-decoder's decoder teacher-forced on the same text) against the
  uniform loss ``U = ln V``. A model whose predictions carry nothing about the text does no better than ``U`` on
  average: with logits ``z`` independent of the next token, ``E[logsumexp z - z_y] >= ln V`` (Jensen:
  ``logsumexp z >= ln V + mean z``). So ``L >= RANDOM_LOSS x U`` looks random, ``L <= TRAINED_LOSS x U`` is
  trained (a quarter of the uniform loss learnt: a model that knew only English's token frequencies would be
  about there), between is not determined. A model confidently wrong on plain English (``L`` above ``U``) may
  also be a trained one from another domain, so it looks random only when its predictions are also near uniform
  (mean entropy at least ``UNIFORM_ENTROPY x U``) or its normalisation weights are as initialised;
- a model with no LM head (an encoder): how far its sharpest head is from uniform attention, its mean entropy over
  rows divided by ``ln`` of the keys each row sees. A random initialisation of the usual scale (weights of std
  0.02) gives scores of spread ``s`` well under 1, hence an entropy of about ``ln k - s^2 / 2``: every head at
  least ``RANDOM_ATTENTION`` of uniform looks random; a head at most ``TRAINED_ATTENTION`` (peaked on a few keys)
  is trained;
- what every source may add: its normalisation layers' weights, each one constant (as ``from_config`` leaves
  them, 1 or the family's ``initializer_factor``), which no trained model keeps;
- the embedded model says so itself (its description's ``random_weights``).

What a greedy generation wrote is named too where it is no text (:func:`generation_note`): nothing but special
tokens, or one token repeated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor

from attnviz.i18n.message import Message, msg

if TYPE_CHECKING:
    from attnviz.models.record import AttentionRecord

REFERENCE_TEXT = (
    "The cat sat on the mat. The dog sat on the rug. One, two, three, four, five, six, seven, eight, nine, ten."
)
REFERENCE_TOKENS = 64  # the reference text is read to at most this many tokens (it has about 35)
RANDOM_LOSS = 0.95  # L >= 0.95 U: no better than uniform guessing (U = ln V), within the text's sampling noise
TRAINED_LOSS = 0.75  # L <= 0.75 U: a quarter of the uniform loss learnt
UNIFORM_ENTROPY = 0.9  # the mean predictive entropy at least 0.9 U: predictions near uniform
RANDOM_ATTENTION = 0.9  # every head's entropy at least 0.9 of uniform (scores' spread under about 0.77 at 20 keys)
TRAINED_ATTENTION = 0.5  # a head at most half of uniform: peaked on a few keys
REPEATED_TOKENS = 3  # a generation of at least this many tokens, all one token, is named as repeated


class WeightsVerdict(StrEnum):
    TRAINED = "trained"
    LOOKS_RANDOM = "looks random"
    NOT_DETERMINED = "not determined"


@dataclass(frozen=True)
class WeightsCheck:
    """What one short pass said of a model's weights.

    verdict: trained, looks random or not determined; basis: what was read ("next_token": a decoder's loss on the
    reference text; "target": an encoder-decoder's, teacher-forced; "attention": its heads' spread; "declared": the
    model says its weights are random; "none": nothing could be read); n_tokens: the tokens scored (or the rows
    read); loss, uniform, entropy: the mean loss, ``ln V`` and the mean predictive entropy, in nats per token;
    sharpest: the sharpest head's entropy as a fraction of uniform attention; norms_at_init: every normalisation
    weight as initialised (None: the model has none to read).
    """

    verdict: WeightsVerdict
    basis: str
    n_tokens: int = 0
    loss: float | None = None
    uniform: float | None = None
    entropy: float | None = None
    sharpest: float | None = None
    norms_at_init: bool | None = None

    @property
    def looks_random(self) -> bool:
        return self.verdict is WeightsVerdict.LOOKS_RANDOM

    @property
    def note(self) -> Message:
        """What a page says beside results that would otherwise read as meaning, with the numbers."""
        if self.basis == "declared":
            return msg("weights_check.declared")
        if self.basis == "attention":
            return msg("weights_check.random_attention", sharpest=self.sharpest, init=self._init_words())
        return msg("weights_check.random_loss", loss=self.loss, uniform=self.uniform, init=self._init_words())

    def _init_words(self) -> Message | str:
        return msg("weights_check.norms_at_init") if self.norms_at_init else ""

    def to_json(self) -> dict:
        return {
            "verdict": self.verdict.value,
            "basis": self.basis,
            "n_tokens": self.n_tokens,
            "loss": self.loss,
            "uniform_loss": self.uniform,
            "entropy": self.entropy,
            "sharpest_head": self.sharpest,
            "norms_at_init": self.norms_at_init,
        }


DECLARED_RANDOM = WeightsCheck(WeightsVerdict.LOOKS_RANDOM, "declared")
NOT_READ = WeightsCheck(WeightsVerdict.NOT_DETERMINED, "none")


@runtime_checkable
class ChecksWeights(Protocol):
    """A source that measured, once when it loaded, whether its weights look trained."""

    weights_check: WeightsCheck  # the check of REFERENCE_TEXT, made when first read, then kept with the source


def weights_check(source) -> WeightsCheck:
    """``source``'s own check where it makes one (:class:`ChecksWeights`); else what its description says."""
    if isinstance(source, ChecksWeights):
        return source.weights_check
    return DECLARED_RANDOM if source.description.random_weights else NOT_READ


NORM_NAMES = ("norm", "ln_")  # LayerNorm, RMSNorm, T5LayerNorm, LlamaRMSNorm, GPT-2's ln_1 …


def norms_at_init(model: torch.nn.Module) -> bool | None:
    """Whether every normalisation layer's weight is one constant, as initialisation leaves it (1, or 0 for
    Gemma's ``1 + w``, or T5's ``initializer_factor``); None when the model has no such weight to read (none, or
    every one offloaded to the meta device)."""
    found = False
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        leaf = name.rsplit(".", 1)[-1].lower()
        kind = type(module).__name__.lower()
        if not isinstance(weight, Tensor) or weight.ndim != 1 or weight.is_meta or weight.numel() < 2:
            continue
        if "norm" not in kind and not leaf.startswith(NORM_NAMES) and "norm" not in leaf:
            continue
        found = True
        if bool(weight.detach().min() != weight.detach().max()):
            return False
    return True if found else None


def from_logits(logits: Tensor, targets: Tensor, basis: str, norms: bool | None) -> WeightsCheck:
    """The check from a pass's logits (T, V) at each scored position and the tokens that came next (T,), in the
    model's dtype and device (the loss and entropy accumulate in float32)."""
    if logits.shape[0] == 0:
        return NOT_READ
    logits = logits.float()
    loss = float(F.cross_entropy(logits, targets.to(logits.device)))
    log_p = logits.log_softmax(-1)
    entropy = float(-(log_p.exp() * log_p).sum(-1).mean())
    uniform = math.log(logits.shape[-1])
    if loss <= TRAINED_LOSS * uniform:
        verdict = WeightsVerdict.TRAINED
    elif loss >= RANDOM_LOSS * uniform and (entropy >= UNIFORM_ENTROPY * uniform or norms):
        verdict = WeightsVerdict.LOOKS_RANDOM
    else:
        verdict = WeightsVerdict.NOT_DETERMINED
    return WeightsCheck(verdict, basis, int(targets.numel()), loss, uniform, entropy, norms_at_init=norms)


def from_attention(record: AttentionRecord, norms: bool | None) -> WeightsCheck:
    """The check from a record of the reference text: each head's mean over rows of its entropy divided by ``ln``
    of the keys the row sees (rows that see one key left out), the sharpest head's against the thresholds."""
    per_head = []
    for layer in record.layers:
        seen = (layer.keys.hi - layer.keys.lo).float()  # (q_len,)
        rows = seen >= 2
        if not bool(rows.any()):
            continue
        per_head.append((layer.rows["entropy"][:, rows].float() / seen[rows].log()).nanmean(-1))  # (n_head,)
    if not per_head:
        return NOT_READ
    sharpest = float(torch.cat(per_head).min())
    if sharpest >= RANDOM_ATTENTION or norms:  # a large initialisation may peak a head; its norms still tell
        verdict = WeightsVerdict.LOOKS_RANDOM
    elif sharpest <= TRAINED_ATTENTION:
        verdict = WeightsVerdict.TRAINED
    else:
        verdict = WeightsVerdict.NOT_DETERMINED
    return WeightsCheck(verdict, "attention", record.q_len, sharpest=sharpest, norms_at_init=norms)


def generation_note(ids: Sequence[int], text: str, token: str) -> Message | None:
    """What a greedy generation was, where it was no text to read: ``ids`` the tokens written, ``text`` what they
    decode to (special tokens left out), ``token`` the first one's own text. One token written at least
    :data:`REPEATED_TOKENS` times and nothing else is named as repeated; tokens that decode to no text, as nothing.
    None for an ordinary generation."""
    empty = not text  # every token special: skipped in the decoding
    if len(ids) >= REPEATED_TOKENS and len(set(ids)) == 1:
        return msg("weights_check.repeated_special" if empty else "weights_check.repeated", n=len(ids), token=token)
    return msg("weights_check.wrote_nothing", n=len(ids), token=token) if empty else None

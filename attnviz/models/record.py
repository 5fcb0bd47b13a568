"""The one contract between model sources and pages.

Every source (the embedded default, a Hugging Face encoder or decoder, a local
directory) turns text into an :class:`AttentionRecord`; every page reads only
records. So a page written once works with every model.

A record holds what :mod:`attnviz.core.capture` kept for each layer, never the full
(n_layer, n_head, T, T) weights: per-row statistics, pooled maps, the mask each
layer applied, and q and k, from which any head (or any window of one) comes
back at full resolution on demand. It is read-only once built, so a cache can
hand the same object to every rerun without copying it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import pandas as pd
import torch
from torch import Tensor

from attnviz.core.alignment import CROSS_COLUMNS, coverage, monotonicity
from attnviz.core.capture import FULL_VIEW_TOKENS, SINK_STAT, WINDOW_CELLS, LayerCapture, weights_window
from attnviz.core.head_stats import STAT_COLUMNS, summarize_rows
from attnviz.core.masks import KeyRanges
from attnviz.core.tokenizer import Token
from attnviz.core.value_norms import LOW_NORM_STAT, value_weighted
from attnviz.i18n.message import Text, concat, join

Head = int | str  # a head index, or "mean" for the mean over the layer's heads


LABEL_CHARS = 16  # a token's text in an axis label is cut to this many characters, with an ellipsis


def short_text(text: str, limit: int = LABEL_CHARS) -> str:
    """``text`` cut to ``limit`` characters, the last one an ellipsis when anything was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def token_labels(tokens: list[Token], limit: int | None = LABEL_CHARS) -> list[str]:
    """Unique axis labels, "index token", so repeated tokens stay separate rows; long tokens cut with an ellipsis.

    A 3,000-character token would otherwise take the whole plot's width for its label.
    ``limit=None`` keeps every token whole (for hover text).
    """
    return [f"{i} {tok.text if limit is None else short_text(tok.text, limit)}" for i, tok in enumerate(tokens)]


def cut_tokens(tokens: list[Token]) -> list[tuple[int, str]]:
    """The (index, full text) of every token whose label :func:`token_labels` cut."""
    return [(i, tok.text) for i, tok in enumerate(tokens) if len(tok.text) > LABEL_CHARS]


@dataclass(frozen=True)
class ModelOutputs:
    """What the model computed from the same pass as the attention, so pages never rerun it.

    hidden: (T, d_model), the last layer's hidden states; next_token_logits:
    (vocab,), the prediction after the last token (decoders with an LM head).
    """

    hidden: Tensor | None = None
    next_token_logits: Tensor | None = None


@dataclass(eq=False)
class AttentionRecord:
    """What a model's attention did to one text, in bounded memory: one kind of attention of one stack.

    layers: one :class:`LayerCapture` per layer (same q_len, k_len and pooling).
    n_input_tokens: how many tokens the text had before truncation to max_tokens.
    implementation: which code produced the weights.
    kind: what the layers' queries attend over: "self" (their own text; ``causal`` says whether only its
    past) or "cross" (another text, ``key_tokens``: an encoder-decoder's target over its source).
    stack: "" for a model of one stack (a decoder or an encoder), else "encoder" or "decoder".
    key_tokens: the keys' tokens where they are not the queries' (cross-attention), else None.
    """

    model_name: str
    tokens: list[Token]
    layers: list[LayerCapture]
    n_kv_head: int
    causal: bool
    implementation: str
    n_input_tokens: int
    random_weights: bool = False
    outputs: ModelOutputs = field(default_factory=ModelOutputs)
    kind: str = "self"
    stack: str = ""
    key_tokens: list[Token] | None = None

    @property
    def keys_tokens(self) -> list[Token]:
        """The tokens the keys read: the source for cross-attention, else the queries' own."""
        return self.tokens if self.key_tokens is None else self.key_tokens

    @property
    def cross(self) -> bool:
        return self.kind == "cross"

    @property
    def n_layer(self) -> int:
        return len(self.layers)

    @property
    def n_head(self) -> int:
        return self.layers[0].rows["entropy"].shape[0]

    @property
    def q_len(self) -> int:
        return self.layers[0].keys.q_len

    @property
    def k_len(self) -> int:
        return self.layers[0].keys.k_len

    @property
    def bin_size(self) -> int:
        """Tokens per pooled cell, a side (1: the pooled maps are at full resolution)."""
        return self.layers[0].bin_size

    @property
    def truncated(self) -> bool:
        return self.n_input_tokens > len(self.tokens)

    @property
    def full_view(self) -> bool:
        """Whether a whole head fits the full-resolution view."""
        return max(self.q_len, self.k_len) <= FULL_VIEW_TOKENS

    @property
    def nbytes(self) -> int:
        """Bytes held, for bounding caches: the captures plus the outputs."""
        extra = [t for t in (self.outputs.hidden, self.outputs.next_token_logits) if t is not None]
        return sum(layer.nbytes for layer in self.layers) + sum(t.numel() * t.element_size() for t in extra)

    @property
    def has_sinks(self) -> bool:
        """Whether the model's layers have learned attention sinks (rows then sum to 1 minus the sink's share)."""
        return any(SINK_STAT in layer.rows for layer in self.layers)

    @property
    def has_value_norms(self) -> bool:
        """Whether every layer kept its keys' value norms ‖v_j W_O^h‖ (value-weighted attention)."""
        return bool(self.layers) and all(layer.value_norms is not None for layer in self.layers)

    @property
    def stat_columns(self) -> tuple[str, ...]:
        """The per-head statistics this record has: :data:`STAT_COLUMNS`, ``sink_weight`` with sinks and
        ``low_norm_weight`` with value norms."""
        if self.cross:
            return CROSS_COLUMNS
        extra = (*((SINK_STAT,) if self.has_sinks else ()), *((LOW_NORM_STAT,) if self.has_value_norms else ()))
        return (*STAT_COLUMNS, *extra)

    def value_norms(self, layer: int, head: Head | None = None, cols: tuple[int, int] | None = None) -> Tensor:
        """‖v_j W_O^h‖ of keys c0..c1-1: one head (cols,), "mean" over heads (cols,), None every head (n_head, cols).

        ValueError when the record kept no value norms (see ``has_value_norms``).
        """
        norms = self.layers[layer].value_norms
        if norms is None:
            raise ValueError("this record kept no value norms (the source cannot see its output projection)")
        c0, c1 = cols or (0, self.k_len)
        norms = norms[:, c0:c1]  # (n_head, cols)
        if head is None:
            return norms
        return norms.mean(dim=0) if head == "mean" else norms[int(head)]

    def value_weighted(
        self, layer: int, head: Head | None, rows: tuple[int, int] | None = None, cols: tuple[int, int] | None = None
    ) -> Tensor:
        """‖α_ij · v_j W_O^h‖ at full resolution, as :meth:`weights` (one head, "mean" over heads or None: all).

        The weights window times its keys' norms (attnviz.core.value_norms.value_weighted); never stored.
        """
        rows, cols = rows or (0, self.q_len), cols or (0, self.k_len)
        weights = weights_window(self.layers[layer], None if head in (None, "mean") else int(head), rows, cols)
        mapped = value_weighted(weights, self.value_norms(layer, None if head in (None, "mean") else head, cols))
        return mapped.mean(dim=0) if head == "mean" else mapped

    @property
    def keeps_qk(self) -> bool:
        """Whether q and k were kept (logit parts, rescaled softmaxes need them)."""
        return all(layer.q is not None and layer.k is not None for layer in self.layers)

    def sink_weight(self, layer: int, head: Head, rows: tuple[int, int] | None = None) -> Tensor | None:
        """Each row's weight on the learned sink, one head or the mean over heads: (rows,); None without sinks.

        A layer without sinks in a model that has them (sliding layers only, say) gives zeros.
        """
        if not self.has_sinks:
            return None
        r0, r1 = rows or (0, self.q_len)
        values = self.layers[layer].rows.get(SINK_STAT)
        if values is None:
            return torch.zeros(r1 - r0)
        return values[:, r0:r1].mean(dim=0) if head == "mean" else values[int(head), r0:r1]

    def keys(self, layer: int) -> KeyRanges:
        """The mask layer ``layer`` really applied."""
        return self.layers[layer].keys

    def mask(self, layer: int = 0, rows: tuple[int, int] | None = None, cols: tuple[int, int] | None = None) -> Tensor:
        """What to draw for the layer: bool (rows, cols), True where a query attends.

        The layer's real mask, with the rows of pad tokens hidden too: the model
        computes them, but they carry no meaning.
        """
        (r0, r1), (c0, c1) = rows or (0, self.q_len), cols or (0, self.k_len)
        real = torch.tensor([not t.pad for t in self.tokens[r0:r1]], dtype=torch.bool)  # (rows,)
        return self.keys(layer).block(r0, r1, c0, c1) & real[:, None]

    def mask_summary(self) -> Text:
        """What the layers' masks are, e.g. "causal" or "L0-L4: causal, sliding window of 4; L5: causal"."""
        names = [self.keys(layer).describe() for layer in range(self.n_layer)]
        if len(set(names)) == 1:
            return names[0]
        runs: list[tuple[int, int, str]] = []
        for layer, name in enumerate(names):
            if runs and runs[-1][2] == name and runs[-1][1] == layer - 1:
                runs[-1] = (runs[-1][0], layer, name)
            else:
                runs.append((layer, layer, name))
        return join((concat(f"L{a}{'' if a == b else f'-L{b}'}: ", name) for a, b, name in runs), "; ")

    def weights(
        self, layer: int, head: Head | None, rows: tuple[int, int] | None = None, cols: tuple[int, int] | None = None
    ) -> Tensor:
        """Full-resolution weights of one head (or "mean" over heads): (rows, cols), 0 where masked.

        ``head=None`` gives every head: (n_head, rows, cols). Without ``rows``/``cols``
        the whole head, which must fit in the window limit (512 x 512 cells);
        longer inputs ask for a window.
        """
        rows, cols = rows or (0, self.q_len), cols or (0, self.k_len)
        capture = self.layers[layer]
        if head is None or head == "mean":
            weights = weights_window(capture, None, rows, cols)  # (n_head, rows, cols)
            return weights if head is None else weights.mean(dim=0)
        return weights_window(capture, int(head), rows, cols)

    def pooled(self, layer: int, head: Head, kind: str = "max") -> Tensor:
        """One head's pooled map (P, Pk), ``kind`` "max" or "mean"; NaN where a bin holds no visible cell."""
        capture = self.layers[layer]
        if kind not in ("max", "mean"):
            raise ValueError(f"kind must be 'max' or 'mean', not {kind!r}")
        if head == "mean":
            return capture.mean_pooled_max if kind == "max" else capture.pooled_mean.mean(dim=0)
        return (capture.pooled_max if kind == "max" else capture.pooled_mean)[int(head)]

    def pooled_grid(self, kind: str = "max") -> Tensor:
        """Every head's pooled map: (n_layer, n_head, P, Pk)."""
        return torch.stack([layer.pooled_max if kind == "max" else layer.pooled_mean for layer in self.layers])

    def mean_grid(self) -> Tensor:
        """The max-pooled mean over heads of every layer: (n_layer, P, Pk)."""
        return torch.stack([layer.mean_pooled_max for layer in self.layers])

    def row_stat(self, name: str) -> Tensor:
        """One per-row statistic for every head: (n_layer, n_head, q_len).

        ``sink_weight`` is 0 in a layer without sinks of a model that has them (sliding layers only, say).
        """
        if name in (SINK_STAT, LOW_NORM_STAT):
            return torch.stack([layer.rows.get(name, torch.zeros_like(layer.rows["entropy"])) for layer in self.layers])
        return torch.stack([layer.rows[name] for layer in self.layers])

    def live_rows(self) -> Tensor:
        """Rows that have a choice to make, per layer: (n_layer, q_len).

        A row that sees fewer than two keys puts all its weight on one key whatever
        the head does; a pad's row carries no meaning. Both are left out of statistics.
        """
        real = torch.tensor([not t.pad for t in self.tokens], dtype=torch.bool)  # (q_len,)
        return torch.stack([(self.keys(layer).visible() >= 2) & real for layer in range(self.n_layer)])

    @functools.cached_property
    def statistics(self) -> pd.DataFrame:
        """One row per head: the row-averaged statistics and flags (computed once per record); for cross-attention,
        :data:`~attnviz.core.alignment.CROSS_COLUMNS` (monotonicity and coverage per head)."""
        live = self.live_rows()[:, None, :]  # (n_layer, 1, q_len)
        visible = torch.stack([self.keys(layer).visible() for layer in range(self.n_layer)])[:, None, :].float()
        if self.cross:
            return self._cross_statistics(live, visible)
        names = ("entropy", *_AVERAGED, *((SINK_STAT,) if self.has_sinks else ()))
        names += (LOW_NORM_STAT,) if self.has_value_norms else ()
        rows = {name: self.row_stat(name) for name in names}
        rows["entropy_norm"] = rows["entropy"] / visible.log().clamp_min(1e-12)
        rows = {name: value.masked_fill(~live, math.nan) for name, value in rows.items()}
        return summarize_rows(rows)

    def _cross_statistics(self, live: Tensor, visible: Tensor) -> pd.DataFrame:
        names = ("entropy", "max_weight", "first_token_weight", "alignment_offset")
        rows = {name: self.row_stat(name) for name in names}
        rows["entropy_norm"] = rows["entropy"] / visible.log().clamp_min(1e-12)
        rows = {name: value.masked_fill(~live, math.nan) for name, value in rows.items()}
        frame = summarize_rows(rows, CROSS_COLUMNS[:5])
        real = torch.tensor([not t.pad for t in self.tokens], dtype=torch.bool)  # (T,) target rows
        n_source = sum(not t.pad for t in self.keys_tokens)
        whole = [layer.weights for layer in self.layers]  # (n_head, T, S) each: a cross capture keeps its weights
        frame["monotonicity"] = torch.cat([monotonicity(w, real) for w in whole]).numpy()
        frame["coverage"] = torch.cat([coverage(w, n_source, real) for w in whole]).numpy()
        return frame[["layer", "head", *CROSS_COLUMNS, "flags"]]

    def labels(self, full: bool = False) -> list[str]:
        """Axis labels of the queries, "index token", cut to a readable width (``full``: whole, for hover)."""
        return token_labels(self.tokens, None if full else LABEL_CHARS)

    def key_labels(self, full: bool = False) -> list[str]:
        """Axis labels of the keys (the source's tokens for cross-attention), as :meth:`labels`."""
        return token_labels(self.keys_tokens, None if full else LABEL_CHARS)


_AVERAGED = ("max_weight", "first_token_weight", "prev_token_weight", "self_weight", "mean_distance")


@dataclass(eq=False)
class BatchRecord:
    """Several texts run as one padded batch.

    key_mask: bool (batch, T), True on real tokens, False on pads. Each record
    is one sentence's capture, pads included; its statistics leave pad rows out.
    """

    records: list[AttentionRecord]
    key_mask: Tensor
    side: str

    @property
    def nbytes(self) -> int:
        return sum(record.nbytes for record in self.records)

    @functools.cached_property
    def pad_key_weight(self) -> float:
        """The largest weight any real query puts on a pad key, over every layer and head (0 when masked right)."""
        worst = 0.0
        for record, real in zip(self.records, self.key_mask, strict=True):
            real_at = real.nonzero()[:, 0]
            pads_at = (~real).nonzero()[:, 0]
            if not len(pads_at) or not len(real_at):
                continue
            rows = (int(real_at[0]), int(real_at[-1]) + 1)  # real tokens are one run, pads the other
            cols = (int(pads_at[0]), int(pads_at[-1]) + 1)
            for capture in record.layers:
                on_pads = weights_window(capture, None, rows, cols)  # (n_head, n_real, n_pad)
                worst = max(worst, float(on_pads.abs().max()))
        return worst


@dataclass(eq=False)
class GenerationRecord:
    """A greedy generation: the record covers prompt + generated tokens.

    Row p of the record is the attention of the token at position p, the query
    that predicted token p + 1; rows from ``n_prompt`` on belong to generated tokens.
    """

    record: AttentionRecord
    n_prompt: int
    generated_ids: list[int]
    text: str
    n_prompt_input: int = 0  # prompt tokens before the start was cut to fit max_tokens

    @property
    def nbytes(self) -> int:
        return self.record.nbytes

    @property
    def prompt_truncated(self) -> bool:
        return self.n_prompt_input > self.n_prompt

    def prompt_cut(self, context: int, n_new: int) -> str | None:
        """Why the prompt was cut, for the page's notice: None when it was not; "room" when it was cut so that
        it and ``n_new`` new tokens fit in ``context``; "no_room" when ``context`` <= ``n_new`` left no room,
        so the model still read one prompt token and prompt + generated tokens exceed ``context``."""
        if not self.prompt_truncated:
            return None
        return "room" if self.n_prompt + n_new <= context else "no_room"

    def past_context(self, context: int) -> bool:
        """Whether prompt + generated tokens are more than ``context`` (Max tokens below the tokens to generate)."""
        return self.n_prompt + len(self.generated_ids) > context

    def prompt_text(self) -> str:
        """The prompt tokens the model actually read, as display text."""
        return " ".join(t.text for t in self.record.tokens[: self.n_prompt])

    def labels(self, full: bool = False) -> list[str]:
        """Row labels, with generated tokens marked "✦", cut to a readable width (``full``: whole, for hover)."""
        return [
            f"{i} {'✦' if i >= self.n_prompt else ''}{tok.text if full else short_text(tok.text)}"
            for i, tok in enumerate(self.record.tokens)
        ]


KINDS = ("encoder", "decoder", "cross")  # an encoder-decoder's three kinds of attention, as a page picks them
STACKS = {"encoder": ("encoder",), "decoder": ("decoder", "cross")}  # each stack's kinds, in a layer's order


@dataclass(eq=False)
class EncoderDecoderRecord:
    """What an encoder-decoder's attention did to a source and a target: two stacks of layers.

    The encoder stack's layers attend within the source (kind "self"); each layer of the decoder stack attends
    within the target, causally ("self", ``causal``), then from the target over the source ("cross",
    ``key_tokens`` the source's). Each kind is an :class:`AttentionRecord` of its own (:meth:`part`), so every
    view of one kind reads it as it reads a decoder's or an encoder's.

    target_tokens are the decoder's input (its start token, then the whole target), the queries of the decoder and
    cross parts; ``target_ids`` the target's ids, position i predicting the i-th (teacher-forced); ``losses``
    (len(target_ids),) the model's loss on each, float32; ``generated``: the target is the model's own greedy output.
    """

    encoder: AttentionRecord
    decoder: AttentionRecord
    cross: AttentionRecord
    target_ids: list[int]
    losses: Tensor
    generated: bool
    target_text: str

    def part(self, kind: str) -> AttentionRecord:
        """One kind's record: "encoder", "decoder" or "cross" (ValueError for any other)."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        return getattr(self, kind)

    @property
    def model_name(self) -> str:
        return self.encoder.model_name

    @property
    def source_tokens(self) -> list[Token]:
        return self.encoder.tokens

    @property
    def target_tokens(self) -> list[Token]:
        return self.decoder.tokens

    @property
    def nbytes(self) -> int:
        return sum(self.part(kind).nbytes for kind in KINDS) + self.losses.numel() * 4


PARITY_TOLERANCE = 1e-5  # float32: the largest |ours - model| over every weight that counts as equal
# bfloat16, float16: one eps of the dtype, a weight near 1 rounded one step apart (the model's own eager attention
# softmaxes in its dtype or in float32, by family; ours always in float32). Measured on the CPU: 0 in bfloat16,
# 3.1e-5 in float16 (BERT), tests/tolerances.py
PARITY_TOLERANCES = {"float32": PARITY_TOLERANCE, "bfloat16": 2**-7, "float16": 2**-10}


@dataclass(eq=False)
class Parity:
    """ours and theirs: (n_layer, n_head, T, T); max_abs_diff: (n_layer, n_head); keys: the mask of each layer;
    tokens: what was read (filled in by the source that ran the check)."""

    ours: Tensor
    theirs: Tensor
    max_abs_diff: Tensor
    keys: list[KeyRanges]
    tokens: list[Token] = field(default_factory=list)
    bug: str | None = None  # a known bug put into our layers on purpose (BUGS), or None
    tolerance: float = PARITY_TOLERANCE  # the largest difference that counts as equal, by the model's dtype

    @property
    def masks(self) -> list[Text]:
        """Each layer's mask, described ("causal", "causal, sliding window of 4")."""
        return [k.describe() for k in self.keys]

    @property
    def worst(self) -> float:
        return float(self.max_abs_diff.max()) if self.max_abs_diff.numel() else 0.0

    @property
    def matches(self) -> bool:
        return self.worst <= self.tolerance

    @property
    def nbytes(self) -> int:
        return (self.ours.numel() + self.theirs.numel()) * 4


__all__ = [
    "FULL_VIEW_TOKENS",
    "KINDS",
    "PARITY_TOLERANCE",
    "PARITY_TOLERANCES",
    "STACKS",
    "WINDOW_CELLS",
    "AttentionRecord",
    "BatchRecord",
    "EncoderDecoderRecord",
    "GenerationRecord",
    "Head",
    "ModelOutputs",
    "Parity",
    "cut_tokens",
    "short_text",
    "token_labels",
]

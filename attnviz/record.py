"""The one contract between model sources and pages.

Every source (the embedded default, a Hugging Face encoder or decoder, a local
directory) turns text into an :class:`AttentionRecord`; every page reads only
records. So a page written once works with every model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.tokenizer import Token


@dataclass
class LayerQKV:
    """One layer's projected queries, keys and values for a single sequence.

    q: (n_head, q_len, head_dim); k, v: (n_kv_head, k_len, head_dim), after any
    position rotation, i.e. exactly what went into the softmax.
    """

    q: Tensor
    k: Tensor
    v: Tensor


@dataclass
class AttentionRecord:
    """What a model did to one text.

    attention: (n_layer, n_head, q_len, k_len) float32 on the CPU.
    mask: bool (q_len, k_len), True where a query may attend (None: all keys).
    n_input_tokens: how many tokens the text had before truncation to max_tokens.
    implementation: which attention code produced the weights.
    """

    model_name: str
    tokens: list[Token]
    attention: Tensor
    n_kv_head: int
    causal: bool
    implementation: str
    n_input_tokens: int
    mask: Tensor | None = None
    qkv: list[LayerQKV] | None = None

    @property
    def n_layer(self) -> int:
        return self.attention.shape[0]

    @property
    def n_head(self) -> int:
        return self.attention.shape[1]

    @property
    def q_len(self) -> int:
        return self.attention.shape[2]

    @property
    def k_len(self) -> int:
        return self.attention.shape[3]

    @property
    def truncated(self) -> bool:
        return self.n_input_tokens > len(self.tokens)

    def head_weights(self, layer: int, head: int | str) -> Tensor:
        """One head's (q_len, k_len) weights, or the mean over the layer's heads for head="mean"."""
        return self.attention[layer].mean(dim=0) if head == "mean" else self.attention[layer, head]

    def labels(self) -> list[str]:
        """Unique axis labels, "index token", so repeated tokens stay separate rows."""
        return [f"{i} {tok.text}" for i, tok in enumerate(self.tokens)]


@dataclass
class BatchRecord:
    """Several texts run as one padded batch.

    key_mask: bool (batch, T), True on real tokens, False on pads. Each record's
    attention rows for pad queries are zeroed (they carry no meaning), and its
    mask greys pad rows and pad keys (and the future, for a decoder).
    """

    records: list[AttentionRecord]
    key_mask: Tensor
    side: str

    @classmethod
    def build(
        cls,
        *,
        model_name: str,
        token_rows: list[list[Token]],
        attention: Tensor,
        key_mask: Tensor,
        causal: bool,
        n_kv_head: int,
        implementation: str,
        n_input_tokens: list[int],
        side: str,
    ) -> BatchRecord:
        """attention: (batch, n_layer, n_head, T, T) straight from the model."""
        T = key_mask.shape[1]
        records = []
        for b, tokens in enumerate(token_rows):
            real = key_mask[b]  # (T,)
            mask = real[:, None] & real[None, :]  # (T, T): real query, real key
            if causal:
                mask = mask & torch.ones(T, T, dtype=torch.bool).tril()
            weights = attention[b] * real[None, None, :, None]  # pad query rows -> 0
            records.append(
                AttentionRecord(
                    model_name=model_name,
                    tokens=tokens,
                    attention=weights,
                    n_kv_head=n_kv_head,
                    causal=causal,
                    implementation=implementation,
                    n_input_tokens=n_input_tokens[b],
                    mask=mask,
                )
            )
        return cls(records=records, key_mask=key_mask, side=side)

    def pad_key_weight(self) -> float:
        """The largest weight any real query puts on a pad key (0 when padding is right)."""
        worst = 0.0
        for b, record in enumerate(self.records):
            real = self.key_mask[b]
            if bool((~real).any()):
                on_pads = record.attention[:, :, real][..., ~real]  # (n_layer, n_head, n_real, n_pad)
                worst = max(worst, float(on_pads.abs().max()))
        return worst


@dataclass
class GenerationRecord:
    """A greedy generation: the record covers prompt + generated tokens.

    Row p of ``record.attention`` is the attention of the token at position p,
    the query that predicted token p + 1; rows from ``n_prompt`` on belong to
    generated tokens.
    """

    record: AttentionRecord
    n_prompt: int
    generated_ids: list[int]
    text: str
    n_prompt_input: int = 0  # prompt tokens before the start was cut to fit max_tokens

    @property
    def prompt_truncated(self) -> bool:
        return self.n_prompt_input > self.n_prompt

    def prompt_text(self) -> str:
        """The prompt tokens the model actually read, as display text."""
        return " ".join(t.text for t in self.record.tokens[: self.n_prompt])

    def labels(self) -> list[str]:
        """Row labels, with generated tokens marked "✦"."""
        return [f"{i} {'✦' if i >= self.n_prompt else ''}{tok.text}" for i, tok in enumerate(self.record.tokens)]

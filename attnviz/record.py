"""The one contract between model sources and pages.

Every source (the embedded default, a Hugging Face encoder or decoder, a local
directory) turns text into an :class:`AttentionRecord`; every page reads only
records. So a page written once works with every model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    notes: list[str] = field(default_factory=list)

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

    def labels(self) -> list[str]:
        """Unique axis labels, "index token", so repeated tokens stay separate rows."""
        return [f"{i} {tok.text}" for i, tok in enumerate(self.tokens)]

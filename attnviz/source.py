"""The interface every model source implements, and the errors sources raise.

Pages and the CLI talk to an :class:`AttentionSource` and ask what it can do
(``causal``, ``can_generate``, ``supports_parity``, ``random_weights``); they
never look at concrete classes or model names. Adding a model family means
adding one class that satisfies this protocol; no page changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from attnviz.tokenizer import Token

if TYPE_CHECKING:
    from torch import Tensor

    from attnviz.parity import Parity
    from attnviz.record import AttentionRecord, BatchRecord, GenerationRecord


class ModelUnavailableError(RuntimeError):
    """A model cannot be loaded or run; the message says why and what to do."""


class ParityUnsupportedError(ValueError):
    """There is no other implementation of this source's attention to compare ours with."""


class GenerationUnsupportedError(ValueError):
    """The source has no language-model head to generate with."""


@dataclass(frozen=True)
class Encoding:
    """A text as a source reads it.

    ids: the model's token ids (None for a source without a vocabulary);
    tokens: display tokens, one per position; n_input: how many tokens the text
    had before it was cut to the token limit.
    """

    ids: list[int] | None
    tokens: list[Token]
    n_input: int


@runtime_checkable
class AttentionSource(Protocol):
    """A model whose attention attnviz can capture.

    Shapes: ``n_head`` query heads of ``head_dim`` sharing ``n_kv_head`` key/value
    heads (MHA when equal, GQA/MQA when fewer), in ``n_layer`` layers of width
    ``d_model``. ``max_positions`` is the longest input the model reads.
    """

    name: str
    n_layer: int
    n_head: int
    n_kv_head: int
    head_dim: int
    d_model: int
    max_positions: int
    implementation: str
    random_weights: bool
    causal: bool
    can_generate: bool
    supports_parity: bool

    def encode(self, text: str, max_tokens: int, keep: str = "start") -> Encoding:
        """Tokenise, cut to ``max_tokens`` keeping the "start" or the "end" of the text."""
        ...

    def run(self, text: str, max_tokens: int, *, keep_qk: bool = True) -> AttentionRecord:
        """Capture every layer's attention on ``text`` (bounded memory, see attnviz.capture)."""
        ...

    def reference_weights(self, text: str, max_tokens: int) -> Tensor:
        """Every weight at once from the source's own plain (eager) attention: (n_layer, n_head, T, T).

        The yardstick the capture is tested against; reads at most settings.PARITY_TOKENS tokens.
        """
        ...

    def run_batch(self, texts: list[str], max_tokens: int, side: str = "right") -> BatchRecord:
        """Several texts padded to one length on ``side``, captured as one batch."""
        ...

    def generate(self, prompt: str, n_new: int, max_tokens: int) -> GenerationRecord:
        """Greedy decoding; GenerationUnsupportedError unless ``can_generate``."""
        ...

    def check_parity(self, text: str, max_tokens: int) -> Parity:
        """attnviz's own layers on this model's weights against its attention; ParityUnsupportedError
        unless ``supports_parity``."""
        ...

"""The interface every model source implements, and what it hands back besides records.

Pages and the CLI talk to an :class:`AttentionSource`: a typed description of the model (its stacks of layers
and their shapes, :class:`ModelDescription`), how it reads a text, its one pass (``run_hooked``, with hook functions
at its ``hook_points``; the capture, ``run``, is that pass with a capture session at ``attn``), and the set of things
it can do besides (:class:`Capability`: capture keeping q and k, generate, reproduce its layers, ablate, fill a KV cache,
take a mask, read a target, edit heads). A Hugging Face source reads them from the hook points of its one pass
(:mod:`attnviz.models.hf.points`). They never look at concrete classes or model names. Adding a model family means
adding one class that satisfies this protocol; no page changes. Each capability's methods are a narrow protocol
(:class:`Ablates`, :class:`Generates`, :class:`Reproduces`, :class:`TakesMask`, :class:`CachesKV`,
:class:`EditsHeads`, :class:`TakesTarget`; :class:`Rotates`, :class:`Resumes`, :class:`ReadsHead` refine them),
implemented by a source that can do it, asked by the capability.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

import torch
from torch import Tensor

from attnviz.core.pass_errors import error_in_pass
from attnviz.core.tokenizer import Token
from attnviz.i18n.message import msg

if TYPE_CHECKING:
    from attnviz.core.attention import MultiHeadAttention, PositionRotation
    from attnviz.core.progress import Progress
    from attnviz.i18n.message import Text
    from attnviz.models.record import AttentionRecord, BatchRecord, EncoderDecoderRecord, GenerationRecord, Parity
    from attnviz.models.resume import CachedLayers
    from attnviz.models.statistics import TextStatistics


@contextmanager
def running(name: str, device: torch.device | str | None = None) -> Iterator[None]:
    """Say whose error it is when the model ``name`` fails while it runs on ``device``
    (:func:`attnviz.core.pass_errors.error_in_pass` decides).

    Raised in the model's own code (a config that loads but cannot run: a layer's shapes that do not fit, token
    ids past the embedding), or a file-system error: :class:`~attnviz.errors.ModelUnavailableError`, one line,
    the original chained. Out of memory anywhere: the one-line out-of-memory message naming the device, its
    cache handed back. A RuntimeError or IndexError raised in attnviz's own code:
    :class:`~attnviz.errors.AttnvizBugError`, never the model's. Other programming errors (TypeError,
    AttributeError, KeyError …) are not caught here.
    """
    try:
        yield
    except (MemoryError, RuntimeError, IndexError, OSError) as err:
        said = error_in_pass(err, name, None if device is None else str(device))
        if said is None:
            raise
        raise said from err


class ModelShape(NamedTuple):
    """A model's attention shape, what a capture's cost is predicted from before the model is loaded:
    ``n_layer`` layers of ``n_head`` query heads of ``head_dim``, sharing ``n_kv_head`` key/value heads."""

    n_layer: int
    n_head: int
    n_kv_head: int
    head_dim: int


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


@dataclass(frozen=True, eq=False)
class LayerInput:
    """One attention layer of a source as attnviz's own module, and exactly what entered it on one text.

    Feeding ``hidden`` to ``attention`` with ``mask``, ``rotate`` and ``scale``
    (``attention(hidden, hidden, hidden, mask=mask, rotate=rotate, scale=scale)``)
    reruns the layer's attention as the model ran it.

    layer: its index; attention: the layer as a :class:`~attnviz.core.attention.MultiHeadAttention`
    (the model's own, or a copy of a pretrained layer's weights), read-only;
    hidden: (1, T, d_model), the hidden states that entered it (after the block's
    LayerNorm where there is one); mask: bool (T, T), True where a query may
    attend, the mask the layer applied (None: every key); rotate: the RoPE hook
    (Llama-style layers) or None; scale: the factor on q·k; tokens: the display
    tokens read; n_input: how many tokens the text had before the cut.
    """

    layer: int
    attention: MultiHeadAttention
    hidden: Tensor
    mask: Tensor | None
    rotate: PositionRotation | None
    scale: float
    tokens: list[Token]
    n_input: int


def check_square_mask(mask: Tensor, n_tokens: int) -> None:
    """ValueError unless ``mask`` is (n_tokens, n_tokens), bool or floating point."""
    if tuple(mask.shape) != (n_tokens, n_tokens):
        raise ValueError(msg("model_errors.mask_shape", shape=tuple(mask.shape), n=n_tokens))
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(f"a mask must be bool (True = may attend) or an additive float, not {mask.dtype}")


def perturbed_ids(ids: list[int], start: int, vocab_size: int, seed: int) -> list[int]:
    """``ids`` with every id from ``start`` on replaced by another id of the vocabulary (seeded)."""
    generator = torch.Generator().manual_seed(seed)
    shift = torch.randint(1, vocab_size, (max(0, len(ids) - start),), generator=generator).tolist()
    return ids[:start] + [(i + s) % vocab_size for i, s in zip(ids[start:], shift, strict=True)]


def tiled(items: list, n: int) -> list:
    """``items`` repeated and cut to exactly ``n`` (ValueError when there is nothing to repeat)."""
    if n < 1:
        raise ValueError(f"n_tokens ({n}) must be at least 1")
    if not items:
        raise ValueError(msg("kv_measure.no_tokens"))
    return (items * (n // len(items) + 1))[:n]


def check_batch(batch: int) -> None:
    if batch < 1:
        raise ValueError(f"batch ({batch}) must be at least 1")


def check_layer(layer: int, n_layer: int) -> int:
    """``layer`` if the model has it; ValueError with the range otherwise."""
    if not 0 <= layer < n_layer:
        raise ValueError(msg("model_errors.layer_range", layer=layer, last=n_layer - 1))
    return layer


@dataclass(frozen=True, eq=False)
class AblatedOutputs:
    """What a model gave on one text with some heads ablated, one row per set of heads
    (:meth:`AttentionSource.ablated_outputs`).

    encoding: the text as read; values: float32 on the CPU, (R, T, vocab) next-token logits at every position
    where ``logits`` (a source with an LM head), else (R, T, d_model) last hidden states; layers_run: the softmax
    attention layers the pass ran (a hybrid's fewer than n_layer), whose heads may be ablated.
    """

    encoding: Encoding
    values: Tensor
    logits: bool
    layers_run: int
    head_reads: bool = False  # values: what the LM head reads, (R, T, d) in the model's dtype (ReadsHead)


KV_CACHES = ("transformers", "attnviz")  # whose cache a prefill fills: transformers' DynamicCache, attnviz's KVCache


@dataclass(frozen=True, eq=False)
class CachedKV:
    """Every layer's cached keys and values after one prefill, as the cache holds them.

    layers: one (keys, values) pair per layer, each (batch, n_kv_head, k_len, head_dim) (a sliding layer's k_len
    may be shorter than the prefill); implementation: whose cache held them, one of :data:`KV_CACHES`.
    """

    layers: list[tuple[Tensor, Tensor]]
    implementation: str


class GreedyDecoder(Protocol):
    """Greedy decoding of one prompt, a token at a time: what the KV cache page times.

    ``n_prompt`` tokens were read from the prompt. With the cache, each :meth:`step` feeds only the last token
    and attends over the cached keys and values; without it, each step runs the whole sequence again.
    """

    n_prompt: int

    def step(self) -> int:
        """Produce the next token id (appended to the sequence) and return it."""
        ...

    def seek(self, tokens: Sequence[int]) -> None:
        """Without the cache only: make the sequence the prompt followed by ``tokens``, so the next step reads
        exactly that prefix (a sampled stand-in for a long run)."""
        ...


class Capability(StrEnum):
    """What a source can do beyond capturing a text's attention, each decided by the source, none from another."""

    KEEP_QK = "keep_qk"  # records keep q and k: logit parts, rescaled softmaxes (Scaling), the Mask lab's effects
    VALUE_NORMS = "value_norms"  # records keep ‖v_j W_O^h‖ per head and key: value-weighted attention
    GENERATE = "generate"  # generate(): greedy decoding of a prompt, captured
    REPRODUCE = "reproduce"  # attention_layer(s), check_parity: attnviz's module reproduces its layers
    ABLATE = "ablate"  # ablated_outputs() in the modes of ablation_modes
    KV_CACHE = "kv_cache"  # prefill_kv(), greedy_decoder(): a decoder's cache, filled and decoded with
    MASK = "mask"  # states_under_mask(): every layer attends under a mask the user gives
    TARGET = "target"  # a second text the decoder reads over the first (an encoder-decoder): :class:`TakesTarget`
    EDIT_HEADS = "edit_heads"  # each head's output read, replaced, differentiated: :class:`EditsHeads`


@dataclass(frozen=True)
class Stack:
    """One stack of a model's layers: ``name`` "" for a model of one stack (a decoder or an encoder), else
    "encoder" or "decoder"; ``kinds`` the attention each of its layers runs, in order ("self", then "cross" in an
    encoder-decoder's decoder); ``n_layer`` layers of ``n_head`` query heads of ``head_dim`` sharing ``n_kv_head``
    key/value heads; ``causal``: its self-attention reads only the past."""

    name: str
    kinds: tuple[str, ...]
    n_layer: int
    n_head: int
    n_kv_head: int
    head_dim: int
    causal: bool

    def __post_init__(self) -> None:
        for field_name in ("n_layer", "n_head", "n_kv_head", "head_dim"):
            if getattr(self, field_name) < 1:
                raise ValueError(f"{field_name} must be at least 1, not {getattr(self, field_name)}")
        if not self.kinds or set(self.kinds) - {"self", "cross"}:
            raise ValueError(f"a stack's kinds are 'self' and 'cross', not {self.kinds}")


@dataclass(frozen=True)
class ModelDescription:
    """What a model is, as pages read it: its stacks (one, or an encoder and a decoder), its width, the longest
    input it reads, and whether its weights are random (the embedded model)."""

    stacks: tuple[Stack, ...]
    d_model: int
    max_positions: int
    random_weights: bool = False

    @property
    def attention_kinds(self) -> tuple[str, ...]:
        """The kinds of attention its records have: ("self",) for one stack; an encoder-decoder's "encoder",
        "decoder" and "cross"."""
        if len(self.stacks) == 1:
            return ("self",)
        return (*(stack.name for stack in self.stacks), *("cross" for stack in self.stacks if "cross" in stack.kinds))

    @property
    def causal(self) -> bool:
        """Whether the one stack (or an encoder-decoder's decoder) reads only the past."""
        return self.stacks[-1].causal


def one_stack(n_layer: int, n_head: int, n_kv_head: int, head_dim: int, causal: bool, **rest) -> ModelDescription:
    """The description of a decoder or an encoder: one stack of self-attention."""
    return ModelDescription((Stack("", ("self",), n_layer, n_head, n_kv_head, head_dim, causal),), **rest)


@dataclass(frozen=True, eq=False)
class PassResult:
    """What a source's one pass (:meth:`AttentionSource.run_hooked`, :func:`attnviz.models.hf.points.run`) gives back: the model's output (or, stopped, what the last layer run returned), the last
    hidden states of the pass (None where none was seen), the attention layers the pass numbered, and what the
    ``read_out`` point read (None where not asked)."""

    output: object
    hidden: Tensor | None
    layers_run: int
    stopped: bool
    layer_starts: dict[int, int]  # each layer of the list that ran -> the attention layers before it
    read: dict | None = None


@runtime_checkable
class AttentionSource(Protocol):
    """A model whose attention attnviz can capture: what it is, how it reads a text, and its capture.

    ``description``: its stacks and their shapes; ``capabilities``: what it can do besides capturing a text
    (:class:`Capability`), each with its own narrow protocol below (:class:`Ablates`, :class:`Generates`,
    :class:`Reproduces`, :class:`TakesMask`, :class:`CachesKV`, :class:`EditsHeads`, :class:`TakesTarget`), so a
    source implements what it can do and nothing that would only raise. A Hugging Face source reads its
    capabilities from the hook points of its one pass (:mod:`attnviz.models.hf.points`). ``n_layer``, ``n_head``,
    ``n_kv_head``, ``head_dim``, ``d_model`` and ``max_positions`` are its first stack's (the one :meth:`run`
    reads); ``device`` where it runs.
    """

    name: str
    device: str | torch.device
    n_layer: int
    n_head: int
    n_kv_head: int
    head_dim: int
    d_model: int
    max_positions: int
    implementation: str
    description: ModelDescription
    capabilities: frozenset[Capability]
    route_note: Text  # which route runs, and what it cannot do, for the pages

    def encode(self, text: str, max_tokens: int, keep: str = "start") -> Encoding:
        """Tokenise, cut to ``max_tokens`` keeping the "start" or the "end" of the text."""
        ...

    def run(
        self, text: str, max_tokens: int, *, keep_qk: bool = True, progress: Progress | None = None
    ) -> AttentionRecord:
        """Capture every layer's attention on ``text`` (bounded memory, see attnviz.core.capture); ``progress``
        gets a stage "progress.layer" and a step as each layer is captured."""
        ...

    def run_batch(self, texts: list[str], max_tokens: int, side: str = "right") -> BatchRecord:
        """Several texts padded to one length on ``side``, captured as one batch."""
        ...

    def run_statistics(self, texts: list[str], max_tokens: int) -> list[TextStatistics]:
        """Every head's statistics for each of ``texts`` (attnviz.models.statistics), in as few passes as the
        source can: each text's equal ``heads --json``'s "stats" for it alone, pads never counted."""
        ...

    def reference_weights(self, text: str, max_tokens: int) -> Tensor:
        """Every weight at once from the source's own plain (eager) attention: (n_layer, n_head, T, T).

        The yardstick the capture is tested against; reads at most settings.PARITY_TOKENS tokens.
        """
        ...

    def token_texts(self, ids: Sequence[int]) -> list[str]:
        """The text of each vocabulary id, as one token decodes (what the top next tokens are shown as)."""
        ...

    hook_points: frozenset[str]  # the points run_hooked serves: what the source can do is which it has

    def run_hooked(
        self, inputs, hooks: dict | None = None, *, start_at_layer: int = 0, stop_at_layer: int | None = None, **rest
    ) -> PassResult:
        """The source's one pass on ``inputs`` with ``hooks`` ({point: hook function}) at its :attr:`hook_points`
        (TransformerLens' ``run_with_hooks``; :mod:`attnviz.models.hf.points` lists the points and their hook
        functions); every lab above is hook functions handed to it. ValueError for a point it does not have."""
        ...


@runtime_checkable
class Ablates(Protocol):
    """A source with :attr:`Capability.ABLATE`, or one kind of an encoder-decoder's heads
    (:meth:`TakesTarget.ablation_view`): what the Ablation page and the sweep read."""

    name: str
    device: str | torch.device
    n_layer: int
    n_head: int
    d_model: int
    capabilities: frozenset[Capability]
    route_note: Text
    ablation_modes: tuple[str, ...]  # head ablation modes ablated_outputs honours (attnviz.models.ablation); () none

    def encode(self, text: str, max_tokens: int, keep: str = "start") -> Encoding: ...

    def token_texts(self, ids: Sequence[int]) -> list[str]: ...

    def ablated_outputs(
        self,
        text: str,
        max_tokens: int,
        head_sets: Sequence[Sequence[tuple[int, int]]],
        mode: str,
        resume: CachedLayers | None = None,
        head_reads: bool = False,
    ) -> AblatedOutputs:
        """The model on ``text`` once per set of heads in ``head_sets``, those heads ablated by ``mode`` (one of
        ``ablation_modes``), all in one batch: row r of the result ablates ``head_sets[r]`` ((layer, head) pairs;
        an empty set ablates nothing, through the same code). ModelUnavailableError when ``ablation_modes`` lacks
        ``mode``; the caller bounds R x T (see attnviz.labs.heads_matter.ablation). ``resume``: a :class:`Resumes`
        source's :meth:`Resumes.layer_cache` of the text; ``head_reads``: a :class:`ReadsHead` source's LM head
        input instead of the logits."""
        ...


@runtime_checkable
class Generates(Protocol):
    """A source with :attr:`Capability.GENERATE`: an LM head."""

    def generate(
        self, prompt: str, n_new: int, max_tokens: int, *, progress: Progress | None = None
    ) -> GenerationRecord:
        """Greedy decoding; GenerationUnsupportedError without :attr:`Capability.GENERATE`. ``progress``: a step per new
        token (stage "progress.token"), then one per captured layer."""
        ...


@runtime_checkable
class Reproduces(Protocol):
    """A source with :attr:`Capability.REPRODUCE`: attnviz's own module reproduces its layers (Parity,
    Walkthrough)."""

    def check_parity(self, text: str, max_tokens: int, bug: str | None = None) -> Parity:
        """attnviz's own layers on this model's weights against its attention; ParityUnsupportedError
        without :attr:`Capability.REPRODUCE`. ``bug`` (a key of :meth:`parity_bugs`) breaks our layers on purpose."""
        ...

    def parity_bugs(self) -> dict[str, Text]:
        """The known bugs :meth:`check_parity` can put into our layers for this model: {key: what it does}
        (``str()`` is English, the app renders it in the reader's language)."""
        ...

    def attention_layer(self, text: str, max_tokens: int, layer: int) -> LayerInput:
        """Layer ``layer``'s attention as our module, with the input, mask, RoPE and scale it really had.

        Reads at most settings.PARITY_TOKENS tokens. ParityUnsupportedError when our
        module cannot reproduce this source's layers (without :attr:`Capability.REPRODUCE`).
        """
        ...

    def attention_layers(self, text: str, max_tokens: int, layers: Sequence[int] | None = None) -> list[LayerInput]:
        """:meth:`attention_layer` for several layers (default: all) from one pass of the model."""
        ...


@runtime_checkable
class TakesMask(Protocol):
    """A source with :attr:`Capability.MASK`: every layer attends under a mask the user gives (the Mask lab)."""

    def states_under_mask(
        self, text: str, max_tokens: int, mask: Tensor, perturb_from: int | None = None, seed: int = 0
    ) -> Tensor:
        """The last hidden states (T, d_model) when every layer attends under ``mask`` instead of its own.

        mask: bool (T, T), True = may attend, or additive float (T, T), for the
        first min(max_tokens, settings.MASK_TOKENS) tokens. ``perturb_from``:
        the tokens from that position on are replaced by others (seeded), the
        Mask lab's leak test: with a mask that hides the future, earlier states
        do not change.
        """
        ...


@runtime_checkable
class CachesKV(Protocol):
    """A source with :attr:`Capability.KV_CACHE`: a decoder's cache, filled and decoded with (the KV cache page)."""

    def prefill_kv(
        self,
        text_or_ids: str | Sequence[int] | Tensor,
        n_tokens: int,
        batch: int = 1,
        implementation: str = "transformers",
        dtype: torch.dtype | None = None,
    ) -> CachedKV:
        """Run a prefill of ``n_tokens`` tokens for ``batch`` sequences with a KV cache and hand back what it holds.

        ``text_or_ids``: a text (tokenised, then repeated to n_tokens), a list of ids, or a (batch, T) tensor of
        ids. ``implementation`` (one of :data:`KV_CACHES`) picks the cache where the source has both; ``dtype``
        the activations' dtype (None: the model's own). Only the returned tensors outlive the call, so an
        allocator's growth across it is the cache's.
        """
        ...

    def greedy_decoder(self, prompt: str, use_cache: bool = True) -> GreedyDecoder:
        """A :class:`GreedyDecoder` on ``prompt``; ValueError when this source cannot decode (an encoder)."""
        ...


@dataclass(frozen=True, eq=False)
class RotaryFrequencies:
    """The RoPE frequencies a model rotates q and k by, and where they were read.

    inv_freq: (head_dim / 2,) float32 on the CPU, radians per token of dimension pair i (dimensions i and
    i + head_dim/2, Llama's convention); theta: None when read from the model's own rotary embedding (exact,
    scaling included), else the base they were computed from by Llama's default rule ``1 / theta^(2i / head_dim)``.
    """

    inv_freq: Tensor
    theta: float | None = None


@runtime_checkable
class Resumes(Protocol):
    """A source whose passes can start mid-model (:mod:`attnviz.models.resume`): the exact sweep's passes run only
    from their heads' layer on."""

    def layer_cache(self, text: str, max_tokens: int, mode: str = "zero") -> tuple[AblatedOutputs, CachedLayers | str]:
        """The text with nothing ablated and each layer's output from that pass (checked by a pass from the middle
        layer), or why this model's passes cannot start mid-model; ``ablated_outputs(..., resume=cache)`` then
        starts each pass at its earliest head's layer."""
        ...


@runtime_checkable
class ReadsHead(Protocol):
    """A source whose next-token logits are exactly its LM head's product on what the head reads: the exact sweep
    keeps only that from each pass and forms the logits a block of the vocabulary at a time inside its reduction
    (attnviz.labs.heads_matter.reductions.kl_through_head), never a row's (T, vocab) whole."""

    def unembedding(self) -> tuple[Tensor, Tensor | None] | None:
        """The LM head's weight (vocab, d) and bias (or None), when the logits are its product alone and it runs
        on the CPU; else None. ``ablated_outputs(..., head_reads=True)`` then returns what the head reads."""
        ...


@runtime_checkable
class EditsHeads(Resumes, Protocol):
    """A source whose attention layers' head outputs z (what each output projection reads) can be read, replaced
    and differentiated in a pass (:attr:`Capability.EDIT_HEADS`): activation and attribution patching, direct
    logit attribution (attnviz.labs.heads_matter.patching, attnviz.labs.heads_matter.direct_logits)."""

    def token_ids(self, text: str) -> list[int]:
        """``text``'s token ids without special tokens (a metric's token must be one)."""
        ...

    def head_pass(
        self,
        encoding: Encoding,
        rows: int,
        edit: Callable[[int, Tensor], Tensor],
        *,
        grad: bool = False,
        resume: CachedLayers | None = None,
        first_layer: int = 0,
        read: bool = False,
    ) -> tuple[Tensor, object]:
        """The model on ``encoding`` (as :meth:`encode` gave it) in ``rows`` rows, layer i's z (rows, T, n_head, head_dim) replaced by ``edit(i, z)``:
        (rows, T, vocab) logits or (rows, T, d_model) last hidden states, with a graph when ``grad``; from the layer
        of attention layer ``first_layer`` of ``resume`` on; ``read``: also what turned row 0 into logits (or why
        nothing can be read)."""
        ...

    def head_blocks(self) -> Iterator[tuple[Tensor, Tensor | None]]:
        """Each attention layer's W_O^h (n_head, head_dim, d_model) and its bias (d_model,) or None, one layer at a
        time, float32 on that layer's device."""
        ...


@runtime_checkable
class Rotates(Protocol):
    """A source that can say which rotary position embedding (RoPE) its attention applies (logit parts read it:
    the record keeps q and k after RoPE, never whether the model used it)."""

    def rope_frequencies(self, head_dim: int) -> RotaryFrequencies | None:
        """The frequencies of its RoPE for heads of ``head_dim``; None when its attention has none of that width."""
        ...


@runtime_checkable
class TakesTarget(Protocol):
    """A source with :attr:`Capability.TARGET`: an encoder-decoder, whose decoder reads a target over the source."""

    def run_pair(
        self, text: str, target: str, max_tokens: int, *, n_generate: int = 0, progress: Progress | None = None
    ) -> EncoderDecoderRecord:
        """Every kind of attention on the source ``text`` and ``target`` (or the model's own greedy output of
        ``n_generate`` tokens)."""
        ...

    def target(self, text: str, target: str | None, max_tokens: int, n_generate: int = 0) -> Encoding:
        """The target the decoder reads: ``target``, or the model's greedy output on ``text``."""
        ...

    def encode_target(self, target: str, max_tokens: int) -> Encoding:
        """The target's tokens as the decoder predicts them."""
        ...

    def pair_nbytes(self, n_source: int, n_target: int) -> int:
        """What one :meth:`run_pair` holds, in bytes."""
        ...

    def pair_peak_nbytes(self, n_source: int, n_target: int) -> int:
        """What one :meth:`run_pair` may add to the process at its peak (its admission's price), in bytes."""
        ...

    def ablation_view(self, kind: str, target: str | None, n_generate: int = 0) -> Ablates:
        """The model seen from one kind of its heads and one target, as the Ablation page reads a source."""
        ...

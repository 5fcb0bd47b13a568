"""The embedded default model: a small stack of attnviz's own attention layers.

It needs no download and no GPU, and it is deterministic: token embeddings are
drawn from a generator seeded by a hash of the token text and the model seed,
positions are sinusoidal, and every weight comes from the seed. Its weights
are random, so its patterns show the mechanics of attention (how the same
token attracts the same queries, how position shapes the rows, what a causal
mask does), not language.
"""

from __future__ import annotations

import copy
import hashlib
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, replace

import torch
from torch import Tensor, nn

from attnviz import settings
from attnviz.core.attention import KVCache, MultiHeadAttention
from attnviz.core.capture import CaptureSession
from attnviz.core.masks import KeyRanges, pad_row, padding_mask, positions_from_mask
from attnviz.core.progress import Progress, or_none
from attnviz.core.token_display import visible_text
from attnviz.core.tokenizer import Token, tokenize
from attnviz.core.value_norms import projection_factors
from attnviz.errors import GenerationUnsupportedError, ParityUnsupportedError
from attnviz.i18n.message import Text, msg
from attnviz.models.ablation import ABLATION_MODES, ablation_hooks, check_ran
from attnviz.models.embedded import hooked
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.hf.attention import MaskOverride, ReferenceRun
from attnviz.models.record import AttentionRecord, BatchRecord, GenerationRecord, ModelOutputs
from attnviz.models.resume import CachedLayers
from attnviz.models.source import (
    AblatedOutputs,
    CachedKV,
    Capability,
    Encoding,
    LayerInput,
    ModelDescription,
    PassResult,
    check_batch,
    check_layer,
    check_square_mask,
    one_stack,
    tiled,
)
from attnviz.models.statistics import TextStatistics, record_statistics

QK_GAIN = 1.4
READOUT_VOCAB = 512  # made-up tokens the embedded model "generates" from (the KV cache page times decoding)
PAD = "[PAD]"
_BUILD_LOCK = threading.Lock()


def shown(token: Token) -> Token:
    """The token with invisible characters made visible in its text (``⟨U+202E⟩``); its own text kept as ``raw``."""
    text = visible_text(token.text)
    return token if text == token.text else replace(token, text=text, raw=token.text)


def source_text(token: Token) -> str:
    """What the model embeds: the token's own text, not its display form."""
    return token.raw or token.text


def token_embedding(text: str, d_model: int, seed: int) -> Tensor:
    """A fixed random vector for a token string: the same text always gets the same vector."""
    digest = hashlib.blake2b(f"{seed}\x00{text}".encode(), digest_size=8).digest()
    generator = torch.Generator().manual_seed(int.from_bytes(digest, "little") & (2**63 - 1))
    return torch.randn(d_model, generator=generator)  # (d_model,)


def sinusoidal_code(positions: Tensor, d_model: int) -> Tensor:
    """The transformer's sin/cos position code of each position: (n,) -> (n, d_model)."""
    position = positions.to(torch.float32)[:, None]  # (n, 1)
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(position.shape[0], d_model)
    table[:, 0::2] = torch.sin(position * freq)  # (n, d_model / 2)
    table[:, 1::2] = torch.cos(position * freq)
    return table


def sinusoidal_positions(seq_len: int, d_model: int) -> Tensor:
    """The sin/cos position code of positions 0 … seq_len - 1: (seq_len, d_model)."""
    return sinusoidal_code(torch.arange(seq_len), d_model)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, config: EmbeddedConfig) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(config.d_model)
        self.attn = MultiHeadAttention(config.d_model, config.n_head, config.kv_heads)
        self.ln_mlp = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(config.d_model, 4 * config.d_model), nn.GELU(), nn.Linear(4 * config.d_model, config.d_model)
        )

    def forward(self, x: Tensor, mask: Tensor | None = None, attend=None) -> tuple[Tensor, Tensor | None]:
        """x (B, T, d_model) -> (B, T, d_model), and weights (B, n_head, T, T) unless ``attend`` captures them."""
        h = self.ln_attn(x)
        attn_out, weights = self.attn(h, h, h, mask=mask, need_weights=True, attend=attend)
        x = x + attn_out
        return x + self.mlp(self.ln_mlp(x)), weights


class EmbeddedModel(nn.Module):
    """Seeded embeddings + sinusoidal positions + ``n_layer`` attention blocks: an :class:`AttentionSource`."""

    random_weights = True
    can_generate = False
    supports_parity = False
    route = "attnviz"
    keeps_qk = True
    supports_mask_override = True
    has_value_norms = True
    ablation_modes = ABLATION_MODES

    @property
    def route_note(self) -> Text:
        return msg("model_errors.route_attnviz")

    @property
    def description(self) -> ModelDescription:
        """One stack of the sidebar's sizes, random weights."""
        shape = (self.n_layer, self.n_head, self.n_kv_head, self.head_dim, self.causal)
        return one_stack(*shape, d_model=self.d_model, max_positions=self.max_positions, random_weights=True)

    hook_points = hooked.HOOK_POINTS  # what it can do is which of these it has: capabilities

    @property
    def capabilities(self) -> frozenset[Capability]:
        """Read from its hook points as :meth:`attnviz.models.hf.points.HookMap.capabilities` reads a Hugging Face
        model's (every W_O is its own, so always found): q and k seen (``attn.qkv``): kept, any mask, value norms;
        ``attn.z``: ablation and heads edited; a KV cache when causal. No LM head, nothing our layers copy."""
        points = self.hook_points
        found = {Capability.KEEP_QK, Capability.MASK, Capability.VALUE_NORMS} if "attn.qkv" in points else set()
        found |= {Capability.ABLATE, Capability.EDIT_HEADS} if "attn.z" in points else set()
        return frozenset(found | ({Capability.KV_CACHE} if self.config.causal else set()))

    implementation = "attnviz.attention.MultiHeadAttention + attnviz.capture (chunked, exact)"

    def __init__(self, config: EmbeddedConfig) -> None:
        super().__init__()
        self.config = config
        # the global RNG is seeded, so two sessions building at once must take turns
        with _BUILD_LOCK, torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
            for block in self.blocks:
                # torch's default init makes q·k tiny and every row near-uniform. Unit-variance
                # V/O projections, and Q/K with gain QK_GAIN so that q·k/sqrt(d_k) has a standard
                # deviation of about QK_GAIN² ≈ 2, as peaked as a trained model's rows often are.
                for proj, gain in (
                    (block.attn.w_q, QK_GAIN),
                    (block.attn.w_k, QK_GAIN),
                    (block.attn.w_v, 1.0),
                    (block.attn.w_o, 1.0),
                ):
                    nn.init.normal_(proj.weight, std=gain / math.sqrt(config.d_model))
        self.eval()

    @property
    def name(self) -> str:
        details = ", ".join(f"{k}={v}" for k, v in asdict(self.config).items() if v is not None)
        return f"embedded default ({details})"

    @property
    def n_layer(self) -> int:
        return self.config.n_layer

    @property
    def n_head(self) -> int:
        return self.config.n_head

    @property
    def n_kv_head(self) -> int:
        return self.config.kv_heads

    @property
    def d_model(self) -> int:
        return self.config.d_model

    @property
    def head_dim(self) -> int:
        return self.config.d_model // self.config.n_head

    @property
    def max_positions(self) -> int:
        """Sinusoidal positions have no end; the token limit is the bound."""
        return settings.MAX_TOKENS.high

    @property
    def causal(self) -> bool:
        return self.config.causal

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """What the weights and activations are in (float32 unless loaded in another dtype)."""
        return next(self.parameters()).dtype

    placement: tuple[tuple[str, str], ...] = ()  # one device: no split

    def encode(self, text: str, max_tokens: int, keep: str = "start") -> Encoding:
        """Tokenise with :func:`attnviz.core.tokenizer.tokenize` and keep the first (or last) ``max_tokens``."""
        if max_tokens < 1:
            raise ValueError(msg("model_errors.at_least_one", name="max_tokens", value=max_tokens))
        tokens = [shown(t) for t in tokenize(text)]
        kept = tokens[:max_tokens] if keep == "start" else tokens[max(0, len(tokens) - max_tokens) :]
        return Encoding(ids=None, tokens=kept, n_input=len(tokens))

    def embed(self, tokens: list[list[str]], positions: Tensor) -> Tensor:
        """Token strings (batch of lists, equal length) and positions (batch, T) -> (batch, T, d_model)."""
        d_model = self.config.d_model
        batch, T = positions.shape
        if T == 0:
            return torch.zeros(batch, 0, d_model, device=self.device, dtype=self.dtype)
        table = torch.stack(
            [torch.stack([token_embedding(t, d_model, self.config.seed) for t in row]) for row in tokens]
        )  # (batch, T, d_model)
        pe = sinusoidal_positions(int(positions.max()) + 1, d_model)[positions]  # (batch, T, d_model)
        return (table + pe).to(self.device, self.dtype)

    def _capture(
        self, x: Tensor, keys: list[KeyRanges], keep_qk: bool, progress: Progress | None = None
    ) -> tuple[CaptureSession, Tensor]:
        """x (B, T, d_model) through every block, attention captured per sequence -> the session, final x."""
        progress = or_none(progress)
        progress.stage("progress.layer", self.n_layer)
        n_head, head_dim, d_model = self.n_head, self.head_dim, self.d_model
        # W_O^h: the rows of w_o's input that head h's slice meets, (n_head, head_dim, d_model)
        factors = {
            block.attn: projection_factors(block.attn.w_o.weight.detach().T.reshape(n_head, head_dim, d_model))
            for block in self.blocks
        }
        session = CaptureSession(
            x.shape[0], x.shape[1], self.n_layer * n_head, keep_qk, on_layer=progress.step, out_factors=factors
        )
        return session, self.run_hooked(x, {"attn": session}, keys=keys).output

    def run_hooked(
        self, inputs: Tensor | Sequence[Sequence[str]], hooks: Mapping[str, object] | None = None, **options
    ) -> PassResult:
        """The model's one pass with ``hooks`` at its :data:`~attnviz.models.embedded.hooked.HOOK_POINTS`
        (:func:`attnviz.models.embedded.hooked.run_hooked`): ``resume``, ``start_at_layer``, ``stop_at_layer``,
        ``grad`` and ``keys`` as there."""
        return hooked.run_hooked(self, inputs, hooks, **options)

    def _keys(self, length: int, start: int = 0, end: int | None = None) -> KeyRanges:
        """The mask of a row of ``length`` whose real tokens are start..end-1: causal or not, pads never seen."""
        end = length if end is None else end
        if self.causal:
            return KeyRanges.causal(length, start=start, end=end)
        return KeyRanges.span(length, start, end)

    @torch.no_grad()
    def run(
        self, text: str, max_tokens: int, *, keep_qk: bool = True, progress: Progress | None = None
    ) -> AttentionRecord:
        """Tokenise, truncate to ``max_tokens`` and capture every layer's attention (a ``progress`` step a layer)."""
        encoding = self.encode(text, max_tokens)
        T = len(encoding.tokens)
        x = self.embed([[source_text(t) for t in encoding.tokens]], torch.arange(T)[None])  # (1, T, d_model)
        session, x = self._capture(x, [self._keys(T)], keep_qk, progress)
        return AttentionRecord(
            model_name=self.name,
            tokens=encoding.tokens,
            layers=session.layers[0],
            n_kv_head=self.n_kv_head,
            causal=self.causal,
            implementation=self.implementation,
            n_input_tokens=encoding.n_input,
            random_weights=True,
            outputs=ModelOutputs(hidden=x[0].float().cpu()),
        )

    @torch.no_grad()
    def reference_weights(self, text: str, max_tokens: int) -> Tensor:
        """Every weight from the inspectable path (no capture): (n_layer, n_head, T, T). Short inputs only."""
        tokens = self.encode(text, min(max_tokens, settings.PARITY_TOKENS)).tokens
        layers: list[Tensor] = []  # each (n_head, T, T)
        hooks = {"attn": ReferenceRun(), "attn.pattern": lambda layer, weights: layers.append(weights[0])}
        self.run_hooked([[source_text(t) for t in tokens]], hooks)
        return torch.stack(layers).float().cpu()

    @torch.no_grad()
    def run_batch(self, texts: list[str], max_tokens: int, side: str = "right") -> BatchRecord:
        """Several texts padded to one length on ``side``; pads are kept out of every real row."""
        encodings = [self.encode(t, max_tokens) for t in texts]
        rows = [e.tokens for e in encodings]
        lengths = [len(r) for r in rows]
        T = max(lengths)
        key_mask = padding_mask(lengths, T, side=side)[:, 0, 0]  # (batch, T)
        pad = Token(PAD, 0, 0, special=True, pad=True, raw=PAD)
        token_rows = [pad_row(r, T, pad, side) for r in rows]
        x = self.embed([[source_text(t) for t in r] for r in token_rows], positions_from_mask(key_mask))
        spans = [(0, n) if side == "right" else (T - n, T) for n in lengths]
        session, x = self._capture(x, [self._keys(T, start, end) for start, end in spans], keep_qk=True)
        records = [
            AttentionRecord(
                model_name=self.name,
                tokens=tokens,
                layers=layers,
                n_kv_head=self.n_kv_head,
                causal=self.causal,
                implementation=self.implementation,
                n_input_tokens=encoding.n_input,
                random_weights=True,
                outputs=ModelOutputs(hidden=hidden.float().cpu()),
            )
            for tokens, layers, encoding, hidden in zip(token_rows, session.layers, encodings, x, strict=True)
        ]
        return BatchRecord(records=records, key_mask=key_mask, side=side)

    def run_statistics(self, texts: list[str], max_tokens: int) -> list[TextStatistics]:
        """Each text's per-head statistics, text by text (the model is small: a batch would save little)."""
        return [record_statistics(self.run(text, max_tokens, keep_qk=False)) for text in texts]

    def generate(
        self, prompt: str, n_new: int, max_tokens: int, *, progress: Progress | None = None
    ) -> GenerationRecord:
        raise GenerationUnsupportedError(msg("model_errors.embedded_no_lm_head"))

    def parity_bugs(self) -> dict[str, Text]:
        return {}

    def check_parity(self, text: str, max_tokens: int, bug: str | None = None):
        raise ParityUnsupportedError(msg("model_errors.embedded_no_parity"))

    @torch.no_grad()
    def states_under_mask(
        self, text: str, max_tokens: int, mask: Tensor, perturb_from: int | None = None, seed: int = 0
    ) -> Tensor:
        tokens = [source_text(t) for t in self.encode(text, min(max_tokens, settings.MASK_TOKENS)).tokens]
        T = len(tokens)
        check_square_mask(mask, T)
        if perturb_from is not None:  # any other string embeds as another random vector
            tokens[perturb_from:] = [f"\x00perturbed {seed} {i}" for i in range(perturb_from, T)]
        return self.run_hooked([tokens], {"attn": MaskOverride(mask)}).output[0].float().cpu()  # (T, d_model)

    def attention_layer(self, text: str, max_tokens: int, layer: int) -> LayerInput:
        """Block ``layer``'s own attention and its input: the embeddings run through the blocks before it, then
        the block's LayerNorm (1, T, d_model). Reads at most settings.PARITY_TOKENS tokens."""
        check_layer(layer, self.n_layer)
        return self.attention_layers(text, max_tokens, [layer])[0]

    @torch.no_grad()
    def attention_layers(self, text: str, max_tokens: int, layers: Sequence[int] | None = None) -> list[LayerInput]:
        """:meth:`attention_layer` for several layers (default: all), from one run through the blocks."""
        layers = list(range(self.n_layer)) if layers is None else list(layers)
        for layer in layers:
            check_layer(layer, self.n_layer)
        encoding = self.encode(text, min(max_tokens, settings.PARITY_TOKENS))
        T = len(encoding.tokens)
        mask = self._keys(T).dense().to(self.device)  # (T, T): what every block applies
        inputs: dict[int, Tensor] = {}

        def keep(layer: int, x: Tensor) -> None:
            if layer in layers:
                inputs[layer] = self.blocks[layer].ln_attn(x)  # (1, T, d_model)

        if layers:  # the inspectable path, as parity's reference runs, up to the last layer asked
            hooks = {"attn": ReferenceRun(), "resid.pre": keep}
            self.run_hooked([[source_text(t) for t in encoding.tokens]], hooks, stop_at_layer=max(layers) + 1)
        return [
            LayerInput(
                layer=layer,
                attention=self.blocks[layer].attn,
                hidden=inputs[layer],
                mask=mask,
                rotate=None,
                scale=1.0 / math.sqrt(self.head_dim),  # what scaled_dot_product_attention uses when given none
                tokens=encoding.tokens,
                n_input=encoding.n_input,
            )
            for layer in layers
        ]

    @torch.no_grad()
    def ablated_outputs(
        self,
        text: str,
        max_tokens: int,
        head_sets: Sequence[Sequence[tuple[int, int]]],
        mode: str,
        resume: CachedLayers | None = None,
    ) -> AblatedOutputs:
        """The last hidden states (R, T, d_model), row r with ``head_sets[r]`` ablated (no LM head: no logits):
        :func:`attnviz.models.ablation.ablation_hooks` handed to :meth:`run_hooked` on the fused path.
        ``resume``: the text's :meth:`layer_cache`, the blocks before the earliest head's skipped."""
        rows = [list(heads) for heads in head_sets] or [[]]
        first = min((layer for heads in rows for layer, _ in heads), default=None)
        start = resume.start_for(first) if resume is not None and first is not None else 0
        return self._ablated(text, max_tokens, rows, ablation_hooks(rows, mode, self.n_head), resume, start)

    def _ablated(
        self, text: str, max_tokens: int, rows: list, hooks: dict, resume: CachedLayers | None, start: int
    ) -> AblatedOutputs:
        """The text in ``len(rows)`` rows through :meth:`run_hooked` with ``hooks``, from block ``start`` on."""
        encoding = self.encode(text, max_tokens)
        tokens = [[source_text(t) for t in encoding.tokens]] * len(rows)
        result = self.run_hooked(tokens, hooks, resume=resume, start_at_layer=start)
        check_ran(rows, result.layers_run, self.name)
        return AblatedOutputs(encoding, result.output.float().cpu(), logits=False, layers_run=result.layers_run)

    def layer_cache(self, text: str, max_tokens: int, mode: str = "zero") -> tuple[AblatedOutputs, CachedLayers]:
        """The text with nothing ablated and each block's output (``resid.post``): the sweep's passes start at
        their head's block."""
        kept: list[Tensor] = []
        hooks = {**ablation_hooks([[]], mode, self.n_head), "resid.post": lambda layer, x: kept.append(x)}
        outputs = self._ablated(text, max_tokens, [[]], hooks, None, 0)
        nbytes = sum(x.numel() * x.element_size() for x in kept)
        layers = list(range(self.n_layer))
        return outputs, CachedLayers(outputs=kept, calls_before=layers, n_calls=self.n_layer, nbytes=nbytes)

    def token_ids(self, text: str) -> list[int]:
        """No vocabulary of ids to name a token by: it has no LM head."""
        return []

    def head_pass(
        self,
        encoding: Encoding,
        rows: int,
        edit,
        *,
        grad: bool = False,
        resume: CachedLayers | None = None,
        first_layer: int = 0,
        read: bool = False,
    ) -> tuple[Tensor, None]:
        """The last hidden states (rows, T, d_model) with each block's z (rows, T, n_head, head_dim) given to
        ``edit(block, z)`` before w_o (the ``attn.z`` point), on ``encoding``'s words."""
        tokens = [[source_text(t) for t in encoding.tokens]] * rows
        start = resume.start_for(first_layer) if resume is not None else 0
        return self.run_hooked(tokens, {"attn.z": edit}, resume=resume, start_at_layer=start, grad=grad).output, None

    def head_blocks(self) -> Iterator[tuple[Tensor, Tensor | None]]:
        """Each layer's W_O^h (n_head, head_dim, d_model) and its bias (d_model,) or None, float32 on the model's
        device, one layer at a time."""
        shape = (self.n_head, self.head_dim, self.d_model)
        for block in self.blocks:
            w_o = block.attn.w_o
            yield (
                w_o.weight.detach().float().T.reshape(shape).clone(),
                None if w_o.bias is None else w_o.bias.detach().float().clone(),
            )

    def token_texts(self, ids: Sequence[int]) -> list[str]:
        return [f"⟨{int(i)}⟩" for i in ids]  # the made-up read-out tokens of readout_table

    # --- decoding with attnviz's KVCache (the KV cache page) ---------------------------------------------------

    def forward_blocks(self, x: Tensor, caches: list[KVCache] | None = None) -> Tensor:
        """x (B, T, d_model) through every block with causal attention on the fused path -> (B, T, d_model).

        With ``caches`` (one per block) the new positions attend over everything cached before them and are
        appended; without, x is the whole sequence. The same pre-norm residual block as :class:`Block`.
        """
        for index, block in enumerate(self.blocks):
            h = block.ln_attn(x)
            cache = None if caches is None else caches[index]
            attn_out, _ = block.attn(h, h, h, need_weights=False, kv_cache=cache, is_causal=True)  # (B, T, d_model)
            x = x + attn_out
            x = x + block.mlp(block.ln_mlp(x))
        return x

    def readout_table(self, vocab: int = READOUT_VOCAB) -> Tensor:
        """The stand-in vocabulary the embedded model "generates" from: (vocab, d_model) embeddings of made-up
        tokens ⟨0⟩, ⟨1⟩, …, used both to read the next token out of the last hidden state (argmax of
        hidden · tableᵀ, a tied read-out) and to embed it for the next step. Meaningless as language; the
        attention and cache work per step is exactly a decoder's."""
        d_model, seed = self.d_model, self.config.seed
        table = torch.stack([token_embedding(f"⟨{i}⟩", d_model, seed) for i in range(vocab)])  # (vocab, d_model)
        return table.to(self.device, self.dtype)

    @torch.no_grad()
    def prefill_kv(
        self,
        text_or_ids: str | Sequence[int] | Tensor,
        n_tokens: int,
        batch: int = 1,
        implementation: str = "attnviz",
        dtype: torch.dtype | None = None,
    ) -> CachedKV:
        """Prefill every block with one :class:`KVCache` (attnviz's: the embedded model has no other) and hand
        back what they hold. ``dtype`` is the activations' and so the cache's: None is the model's own, another
        casts a copy of the model."""
        check_batch(batch)
        tokens = tiled([source_text(t) for t in self.encode(str(text_or_ids), n_tokens).tokens], n_tokens)
        positions = torch.arange(n_tokens)[None].expand(batch, n_tokens)  # (B, T)
        dtype = dtype or self.dtype  # the model's own unless asked for another
        model = self if self.dtype == dtype else copy.deepcopy(self).to(dtype)  # shared: a copy
        caches = [KVCache() for _ in model.blocks]
        model.forward_blocks(model.embed([tokens] * batch, positions).to(dtype), caches)  # only the caches outlive it
        return CachedKV([(cache.k, cache.v) for cache in caches], "attnviz")

    def greedy_decoder(self, prompt: str, use_cache: bool = True, vocab: int = READOUT_VOCAB) -> EmbeddedDecoder:
        return EmbeddedDecoder(self, prompt, use_cache, vocab)


class EmbeddedDecoder:
    """Greedy decoding on the embedded model: the next token is the argmax of the last hidden state against
    :meth:`EmbeddedModel.readout_table`, embedded with its position for the next step."""

    def __init__(self, model: EmbeddedModel, prompt: str, use_cache: bool, vocab: int) -> None:
        if not model.causal:
            raise ValueError(msg("kv_measure.needs_causal"))
        tokens = [source_text(t) for t in model.encode(prompt, model.max_positions).tokens]
        if not tokens:
            raise ValueError(msg("kv_measure.empty_prompt"))
        self.model, self.n_prompt, self.length = model, len(tokens), len(tokens)
        self.table = model.readout_table(vocab)  # (vocab, d_model)
        self.prompt = model.embed([tokens], torch.arange(self.n_prompt)[None])  # (1, P, d_model)
        self.x = self.prompt  # what the next step feeds: everything, or (with the cache) only what is new
        self.caches = [KVCache() for _ in model.blocks] if use_cache else None

    def _embedded(self, ids: Sequence[int], start: int) -> Tensor:
        """Made-up tokens ``ids`` at positions start, start + 1, … -> (n, d_model)."""
        positions = sinusoidal_code(torch.arange(start, start + len(ids)), self.model.d_model)  # (n, d_model)
        positions = positions.to(self.table.device, self.table.dtype)
        return self.table[list(ids)] + positions

    @torch.no_grad()
    def step(self) -> int:
        hidden = self.model.forward_blocks(self.x, self.caches)  # (1, T, d_model)
        next_id = int((hidden[0, -1] @ self.table.T).argmax())
        new = self._embedded([next_id], self.length)[None]  # (1, 1, d_model)
        self.x = new if self.caches is not None else torch.cat([self.x, new], dim=1)  # cache: only the new token
        self.length += 1
        return next_id

    def seek(self, tokens: Sequence[int]) -> None:
        if self.caches is not None:
            raise ValueError("seek() is for decoding without the cache")
        self.x = torch.cat([self.prompt, self._embedded(tokens, self.n_prompt)[None]], dim=1)
        self.length = self.n_prompt + len(tokens)

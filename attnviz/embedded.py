"""The embedded default model: a small stack of attnviz's own attention layers.

It needs no download and no GPU, and it is deterministic: token embeddings are
drawn from a generator seeded by a hash of the token text and the model seed,
positions are sinusoidal, and every weight comes from the seed. Its weights
are random, so its patterns show the mechanics of attention (how the same
token attracts the same queries, how position shapes the rows, what a causal
mask does), not language.
"""

from __future__ import annotations

import hashlib
import math
import threading
from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn

from attnviz.attention import MultiHeadAttention, group_size
from attnviz.masks import causal_mask, pad_row, padding_mask, positions_from_mask
from attnviz.record import AttentionRecord, BatchRecord, GenerationRecord, LayerQKV
from attnviz.tokenizer import Token, tokenize

MAX_D_MODEL = 1024
MAX_LAYERS = 12
QK_GAIN = 1.4
PAD = "[PAD]"
_BUILD_LOCK = threading.Lock()
IMPLEMENTATION = "attnviz.attention.scaled_dot_product_attention"


@dataclass(frozen=True)
class EmbeddedConfig:
    """Size and seed of the embedded model; invalid combinations raise ValueError."""

    d_model: int = 64
    n_head: int = 4
    n_kv_head: int | None = None
    n_layer: int = 2
    seed: int = 0
    causal: bool = False

    def __post_init__(self) -> None:
        if not 2 <= self.d_model <= MAX_D_MODEL or self.d_model % 2:
            raise ValueError(f"d_model ({self.d_model}) must be an even number from 2 to {MAX_D_MODEL}")
        if self.n_head < 1:
            raise ValueError(f"n_head ({self.n_head}) must be at least 1")
        if self.d_model % self.n_head:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head}); "
                f"{self.d_model} % {self.n_head} = {self.d_model % self.n_head}"
            )
        group_size(self.n_head, self.kv_heads)
        if not 1 <= self.n_layer <= MAX_LAYERS:
            raise ValueError(f"n_layer ({self.n_layer}) must be from 1 to {MAX_LAYERS}")
        if self.seed < 0:
            raise ValueError(f"seed ({self.seed}) must be non-negative")

    @property
    def kv_heads(self) -> int:
        return self.n_head if self.n_kv_head is None else self.n_kv_head


def token_embedding(text: str, d_model: int, seed: int) -> Tensor:
    """A fixed random vector for a token string: the same text always gets the same vector."""
    digest = hashlib.blake2b(f"{seed}\x00{text}".encode(), digest_size=8).digest()
    generator = torch.Generator().manual_seed(int.from_bytes(digest, "little") & (2**63 - 1))
    return torch.randn(d_model, generator=generator)  # (d_model,)


def sinusoidal_positions(seq_len: int, d_model: int) -> Tensor:
    """The transformer's sin/cos position code: (seq_len, d_model)."""
    position = torch.arange(seq_len, dtype=torch.float32)[:, None]  # (seq, 1)
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(seq_len, d_model)
    table[:, 0::2] = torch.sin(position * freq)  # (seq, d_model / 2)
    table[:, 1::2] = torch.cos(position * freq)
    return table


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

    def forward(self, x: Tensor, mask: Tensor | None, on_qkv=None) -> tuple[Tensor, Tensor]:
        """x (B, T, d_model) -> (B, T, d_model), weights (B, n_head, T, T)."""
        h = self.ln_attn(x)
        attn_out, weights = self.attn(h, h, h, mask=mask, need_weights=True, on_qkv=on_qkv)
        x = x + attn_out
        return x + self.mlp(self.ln_mlp(x)), weights


class EmbeddedModel(nn.Module):
    """Seeded embeddings + sinusoidal positions + ``n_layer`` attention blocks."""

    name = "embedded default"

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
    def decoder(self) -> bool:
        return self.config.causal

    @property
    def n_kv_head(self) -> int:
        return self.config.kv_heads

    @property
    def description(self) -> str:
        return f"{self.name} ({', '.join(f'{k}={v}' for k, v in asdict(self.config).items() if v is not None)})"

    def embed(self, tokens: list[list[str]], positions: Tensor) -> Tensor:
        """Token strings (batch of lists, equal length) and positions (batch, T) -> (batch, T, d_model)."""
        d_model = self.config.d_model
        device = next(self.parameters()).device
        batch, T = positions.shape
        if T == 0:
            return torch.zeros(batch, 0, d_model, device=device)
        table = torch.stack(
            [torch.stack([token_embedding(t, d_model, self.config.seed) for t in row]) for row in tokens]
        )  # (batch, T, d_model)
        pe = sinusoidal_positions(int(positions.max()) + 1, d_model)[positions]  # (batch, T, d_model)
        return (table + pe).to(device)

    def _attend(self, x: Tensor, mask: Tensor | None, on_qkv=None) -> Tensor:
        """x (batch, T, d_model) through every block -> attention (batch, n_layer, n_head, T, T)."""
        layers = []
        for block in self.blocks:
            x, weights = block(x, mask, on_qkv)
            layers.append(weights)  # (batch, n_head, T, T)
        return torch.stack(layers, dim=1).float().cpu()

    @torch.no_grad()
    def run(self, text: str, max_tokens: int, with_qkv: bool = False) -> AttentionRecord:
        """Tokenize, truncate to ``max_tokens`` and record every layer's attention."""
        if max_tokens < 1:
            raise ValueError(f"max_tokens ({max_tokens}) must be at least 1")
        all_tokens = tokenize(text)
        tokens = all_tokens[:max_tokens]
        T = len(tokens)
        device = next(self.parameters()).device
        x = self.embed([[t.text for t in tokens]], torch.arange(T)[None])  # (1, T, d_model)
        mask = causal_mask(T, device=device) if self.config.causal else None  # (T, T)
        qkv: list[LayerQKV] = []

        def keep(q: Tensor, k: Tensor, v: Tensor) -> None:
            qkv.append(LayerQKV(q[0].float().cpu(), k[0].float().cpu(), v[0].float().cpu()))

        if T:
            attention = self._attend(x, mask, keep if with_qkv else None)[0]  # (n_layer, n_head, T, T)
        else:
            attention = torch.zeros(len(self.blocks), self.config.n_head, 0, 0)
        return AttentionRecord(
            model_name=self.description,
            tokens=tokens,
            attention=attention,
            n_kv_head=self.config.kv_heads,
            causal=self.config.causal,
            implementation=IMPLEMENTATION,
            n_input_tokens=len(all_tokens),
            mask=None if mask is None else mask.cpu(),
            qkv=qkv if with_qkv else None,
        )

    @torch.no_grad()
    def run_batch(self, texts: list[str], max_tokens: int, side: str = "right") -> BatchRecord:
        """Several texts padded to one length on ``side``, masked with ``padding_mask``."""
        all_tokens = [tokenize(t) for t in texts]
        rows = [tokens[:max_tokens] for tokens in all_tokens]
        lengths = [len(r) for r in rows]
        T = max(lengths)
        key_mask = padding_mask(lengths, T, side=side)[:, 0, 0]  # (batch, T)
        pad = Token(PAD, 0, 0, special=True, pad=True, raw=PAD)
        token_rows = [pad_row(r, T, pad, side) for r in rows]
        x = self.embed([[t.text for t in r] for r in token_rows], positions_from_mask(key_mask))
        mask = key_mask[:, None, None, :]  # (batch, 1, 1, T)
        if self.config.causal:
            mask = mask & causal_mask(T)
        attention = self._attend(x, mask.to(x.device))  # (batch, n_layer, n_head, T, T)
        return BatchRecord.build(
            model_name=self.description,
            token_rows=token_rows,
            attention=attention,
            key_mask=key_mask,
            causal=self.config.causal,
            n_kv_head=self.config.kv_heads,
            implementation=IMPLEMENTATION,
            n_input_tokens=[len(t) for t in all_tokens],
            side=side,
        )

    def generate(self, prompt: str, n_new: int, max_tokens: int) -> GenerationRecord:
        raise ValueError("the embedded model has no language-model head; pick a decoder such as SmolLM2 to generate")

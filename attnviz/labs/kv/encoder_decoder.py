"""An encoder-decoder's KV cache: the decoder's self-attention keys and values grow with the target, its
cross-attention's are computed once from the source and stay that size for the whole generation.

Per decoder layer and sequence, self-attention keeps 2 x n_kv_head x head_dim values per target token and
cross-attention 2 x n_kv_head x head_dim per source token; the encoder keeps none (it runs once). transformers
holds them in an ``EncoderDecoderCache`` (a self-attention cache and a cross-attention cache);
:meth:`attnviz.models.hf.seq2seq.Seq2SeqSource.prefill_pair_cache` measures one after a prefill.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from attnviz.i18n.message import msg


@dataclass(frozen=True)
class EncoderDecoderKV:
    """The cache of ``n_layer`` decoder layers with ``n_kv_head`` heads of ``head_dim`` (self and cross alike),
    values of ``bytes_per_value`` bytes, for ``batch`` sequences of ``target_len`` target and ``source_len``
    source tokens."""

    n_layer: int
    n_kv_head: int
    head_dim: int
    bytes_per_value: int
    batch: int
    target_len: int
    source_len: int

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_kv_head", "head_dim", "bytes_per_value", "batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.target_len < 0 or self.source_len < 0:
            raise ValueError(f"lengths must be >= 0, not {self.target_len} and {self.source_len}")

    @property
    def bytes_per_token(self) -> int:
        """What one more token of either text adds: K and V of every decoder layer, one attention's worth."""
        return 2 * self.n_layer * self.n_kv_head * self.head_dim * self.bytes_per_value

    @property
    def self_bytes(self) -> int:
        """The self-attention cache: grows by ``bytes_per_token`` with every target token."""
        return self.batch * self.target_len * self.bytes_per_token

    @property
    def cross_bytes(self) -> int:
        """The cross-attention cache: the source's keys and values, fixed for the whole generation."""
        return self.batch * self.source_len * self.bytes_per_token

    @property
    def total_bytes(self) -> int:
        return self.self_bytes + self.cross_bytes


CHECK_HEADERS = {
    "part": "kv_ui.seq2seq_part",
    "tokens": "kv_ui.seq2seq_tokens",
    "estimate (bytes)": "kv_ui.seq2seq_estimate",
    "measured (bytes)": "kv_ui.seq2seq_measured",
    "error (bytes)": "kv_ui.seq2seq_error",
}


def seq2seq_cache_check(source, text: str, target: str | None, max_tokens: int, n_generate: int = 0) -> pd.DataFrame:
    """The estimate from the model's shapes and the texts' lengths beside the bytes of transformers' own
    ``EncoderDecoderCache`` after a prefill of the source and the target, part by part (self, cross, both)."""
    n_source = len(source.encode(text, max_tokens).ids)
    n_target = 1 + len(source.target(text, target, max_tokens, n_generate).ids)  # its start token, then the target
    cache = source.prefill_pair_cache(text, target, max_tokens, 1, n_generate)
    n_layer, n_kv_head, head_dim = source.decoder_kv_shape
    width = source.dtype.itemsize
    estimate = EncoderDecoderKV(n_layer, n_kv_head, head_dim, width, 1, n_target, n_source)
    measured = {
        part: sum(t.numel() * t.element_size() for pair in layers for t in pair) for part, layers in cache.items()
    }
    rows = [
        (msg("kv_ui.seq2seq_self"), n_target, estimate.self_bytes, measured["self"]),
        (msg("kv_ui.seq2seq_cross"), n_source, estimate.cross_bytes, measured["cross"]),
        (msg("kv_ui.seq2seq_both"), n_source + n_target, estimate.total_bytes, measured["self"] + measured["cross"]),
    ]
    return pd.DataFrame(
        [
            {"part": p, "tokens": n, "estimate (bytes)": e, "measured (bytes)": m, "error (bytes)": m - e}
            for p, n, e, m in rows
        ]
    )

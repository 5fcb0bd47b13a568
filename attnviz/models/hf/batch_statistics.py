"""Several texts in one padded pass, and each text's per-head statistics from it (a corpus's unit of work).

Texts are padded on the right, so a real token's keys are the ones it has alone (a decoder never reaches its pads,
an encoder's padding mask hides them) and its positions are its own. Each text's rows are then cut to its own
tokens (:func:`attnviz.models.statistics.trimmed`) before they are averaged: pads never count.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.core.masks import pad_row, padding_mask, positions_from_mask
from attnviz.core.tokenizer import Token
from attnviz.i18n.message import msg
from attnviz.models.source import Encoding
from attnviz.models.statistics import TextStatistics, record_statistics, trimmed


@dataclass(frozen=True)
class PaddedBatch:
    """Texts as one (B, T) batch: their encodings, ids, the key mask (B, T) True on real tokens, positions."""

    encodings: list[Encoding]
    input_ids: Tensor
    key_mask: Tensor
    position_ids: Tensor
    pad: Token
    length: int


def padded_batch(source, texts: list[str], max_tokens: int, side: str = "right") -> PaddedBatch:
    """``texts`` encoded, cut to ``max_tokens`` and padded to the longest on ``side`` (the pad id: the tokenizer's,
    else its end of sequence, else 0)."""
    encodings = [source.encode(t, max_tokens) for t in texts]
    length = max(len(e.ids) for e in encodings)
    pad_id = source.tokenizer.pad_token_id
    if pad_id is None:
        pad_id = source.tokenizer.eos_token_id or 0
    pad_text = source.tokenizer.pad_token or "[PAD]"
    pad = Token(pad_text, 0, 0, special=True, pad=True, raw=pad_text)
    rows = [pad_row(e.ids, length, pad_id, side) for e in encodings]
    input_ids = torch.tensor(rows, dtype=torch.long, device=source.device)  # (B, T)
    key_mask = padding_mask([len(e.ids) for e in encodings], length, side=side)[:, 0, 0]  # (B, T)
    position_ids = positions_from_mask(key_mask).to(source.device)
    return PaddedBatch(encodings, input_ids, key_mask, position_ids, pad, length)


@torch.no_grad()
def run_statistics(source, texts: list[str], max_tokens: int) -> list[TextStatistics]:
    """Every head's statistics for each of ``texts``, from one pass over them padded on the right (no q or k kept).

    A batch whose texts all have the same length runs without a padding mask, as :meth:`HFSource.run` runs one
    text, so a text alone gets exactly what ``run`` gives it. A text with no tokens gets NaN statistics (no row);
    ValueError when no text has a token.
    """
    if not texts:
        return []
    batch = padded_batch(source, texts, max_tokens, "right")
    if batch.length == 0:  # a text with no tokens beside others gets NaN statistics; alone, nothing to run
        raise ValueError(msg("kv_measure.no_tokens"))
    padded = not bool(batch.key_mask.all())
    mask = batch.key_mask.long().to(source.device) if padded else None
    positions = batch.position_ids if padded else None
    session, hidden, _ = source._capture(batch.input_ids, mask, positions, False, statistics_only=True)
    results = []
    for b, (encoding, layers) in enumerate(zip(batch.encodings, session.layers, strict=True)):
        tokens = pad_row(encoding.tokens, batch.length, batch.pad, "right")
        record = source._record(encoding, layers, hidden[b], None, tokens=tokens)
        results.append(record_statistics(trimmed(record, len(encoding.ids)) if padded else record))
    return results

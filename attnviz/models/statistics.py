"""Every head's statistics for one text, as a corpus keeps them: what :meth:`AttentionSource.run_statistics` returns.

A :class:`TextStatistics` frame holds the very entries ``attnviz heads --json`` prints under "stats" (the same
columns in the same order, rounded to 6 places as the JSON is), with NaN where the JSON has null: a corpus run
writes them row for row, and a test compares them with ``heads_json`` of the text run alone.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import pandas as pd

from attnviz import settings
from attnviz.core.masks import KeyRanges
from attnviz.models.record import AttentionRecord, EncoderDecoderRecord

# an encoder-decoder's parts, and the (stack, kind) each one's rows carry, in ``heads --json``'s order
PAIR_PARTS = {"encoder": ("encoder", "self"), "decoder": ("decoder", "causal"), "cross": ("decoder", "cross")}


@dataclass(frozen=True, eq=False)
class TextStatistics:
    """One text's per-head statistics.

    n_tokens: tokens read (after the cut to max_tokens); n_input_tokens: tokens before the cut.
    frame: one row per head, the columns and order of ``heads --json``'s "stats" entries: [stack, kind
    (encoder-decoders only)], layer, head, every statistic of the record, flags.
    routes: how each softmax layer of the first stack was captured: "fused", "reference" or "eager".
    """

    n_tokens: int
    n_input_tokens: int
    frame: pd.DataFrame
    routes: tuple[str, ...]


def _rounded(value: float) -> float:
    return math.nan if math.isnan(value) else round(float(value), settings.STAT_DIGITS)


def statistics_frame(record: AttentionRecord) -> pd.DataFrame:
    """A record's statistics as ``heads --json``'s "stats": layer, head, the record's statistics, flags."""
    stats = record.statistics
    columns = record.stat_columns
    frame = pd.DataFrame({"layer": stats["layer"].astype(int), "head": stats["head"].astype(int)})
    for name in columns:
        frame[name] = [_rounded(v) for v in stats[name].tolist()]
    frame["flags"] = stats["flags"].astype(str)
    return frame.reset_index(drop=True)


def record_statistics(record: AttentionRecord) -> TextStatistics:
    """A one-stack record's :class:`TextStatistics`; pad tokens (a padded batch's) are neither counted nor averaged."""
    n_tokens = sum(not t.pad for t in record.tokens)
    routes = tuple(getattr(layer, "route", "reference") for layer in record.layers)
    return TextStatistics(n_tokens, record.n_input_tokens, statistics_frame(record), routes)


def pair_statistics(pair: EncoderDecoderRecord) -> TextStatistics:
    """An encoder-decoder's :class:`TextStatistics`: each kind's rows with its ``stack`` and ``kind``, as
    ``heads --json`` prints a pair; the tokens are the source's (the encoder's text)."""
    parts = []
    for part, (stack, kind) in PAIR_PARTS.items():
        frame = statistics_frame(pair.part(part))
        frame.insert(0, "kind", kind)
        frame.insert(0, "stack", stack)
        parts.append(frame)
    encoder = pair.part("encoder")
    routes = tuple(getattr(layer, "route", "reference") for layer in encoder.layers)
    frame = pd.concat(parts, ignore_index=True)
    return TextStatistics(len(encoder.tokens), encoder.n_input_tokens, frame, routes)


def trimmed(record: AttentionRecord, n: int) -> AttentionRecord:
    """The first ``n`` tokens of a right-padded record: each layer's rows and mask cut to them (the statistics
    read only those), so its averages run over exactly the rows the text has alone. Pooled maps are left as they
    are (a statistics pass does not read them)."""
    layers = []
    for layer in record.layers:
        keys = layer.keys
        if keys.k_len != keys.q_len:
            raise ValueError(f"a padded batch of self-attention has square masks, not {keys.q_len} x {keys.k_len}")
        if bool((keys.hi[:n] > n).any()):
            raise ValueError("a real token of a right-padded text attends to a pad")
        cut = KeyRanges(keys.lo[:n].clone(), keys.hi[:n].clone(), n)
        rows = {name: value[:, :n].clone() for name, value in layer.rows.items()}
        norms = None if layer.value_norms is None else layer.value_norms[:, :n].clone()
        layers.append(dataclasses.replace(layer, rows=rows, keys=cut, value_norms=norms))
    return dataclasses.replace(record, tokens=record.tokens[:n], layers=layers)

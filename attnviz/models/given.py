"""Records of attention weights someone else computed: a BertViz call's ``outputs.attentions`` read as attnviz's
:class:`~attnviz.models.record.AttentionRecord`, so every view draws them as it draws a capture.

The weights are read as they are: each layer's statistics, pooled maps and windows come from them
(:func:`attnviz.core.capture.capture_weights`, the eager route's reading), and the mask each layer applied is read
from where its weights fall (a causal layer puts none above the diagonal; :func:`attnviz.models.hf.eager.eager_keys`).
Nothing is recomputed: weights that are not weights (negative, rows summing past one, NaN) are refused in one line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from attnviz import settings
from attnviz.core.capture import capture_weights
from attnviz.core.capture.cross import capture_cross
from attnviz.core.capture.layer import pool_bin
from attnviz.core.tokenizer import Token
from attnviz.models.hf.eager import eager_keys
from attnviz.models.record import AttentionRecord

ROW_SUM_SLACK = 1e-3  # a row of weights sums to 1 within this (bfloat16 weights, each rounded: 2^-8 apart at most
# relative; summed over a row they stay within 1e-3 of 1 in every model we read: tests/unit/models/test_given.py)


class GivenWeightsError(ValueError):
    """Weights handed over that are not one sequence's attention weights (a one-line message)."""


def _layer(weights: object, index: int, name: str) -> Tensor:
    if not isinstance(weights, Tensor):
        raise GivenWeightsError(f"{name}[{index}] is a {type(weights).__name__}, not a tensor of weights")
    if weights.ndim == 4:
        if weights.shape[0] != 1:
            raise GivenWeightsError(
                f"{name}[{index}] holds {weights.shape[0]} sequences: pass one (outputs.attentions of a batch of one)"
            )
        weights = weights[0]
    if weights.ndim != 3:
        raise GivenWeightsError(
            f"{name}[{index}] has shape {tuple(weights.shape)}: expected (1, heads, queries, keys) as "
            "output_attentions=True returns it"
        )
    return weights.detach().to("cpu", torch.float32)


def layer_weights(attention: Sequence[object], name: str, n_queries: int, n_keys: int) -> list[Tensor]:
    """Each layer's weights (n_head, q, k), float32 on the CPU, checked: every layer alike, as many queries and keys
    as tokens, values in [0, 1] and rows summing to at most one (GivenWeightsError, one line, where not)."""
    if isinstance(attention, Tensor) or not isinstance(attention, Sequence) or not attention:
        raise GivenWeightsError(f"{name} must be a tuple of tensors, one per layer (outputs.attentions)")
    layers = [_layer(w, i, name) for i, w in enumerate(attention)]
    shape = layers[0].shape
    if any(w.shape != shape for w in layers):
        odd = next(i for i, w in enumerate(layers) if w.shape != shape)
        raise GivenWeightsError(f"{name}[{odd}] has shape {tuple(layers[odd].shape)}, {name}[0] {tuple(shape)}")
    if shape[1:] != (n_queries, n_keys):
        raise GivenWeightsError(
            f"{name} covers {shape[1]} queries x {shape[2]} keys, but {n_queries} x {n_keys} tokens were given"
        )
    cells = len(layers) * shape[0] * shape[1] * shape[2]
    if cells * 4 > settings.cache_bytes():
        raise GivenWeightsError(
            f"{name} holds {cells:,} weights ({cells * 4 / 2**30:.1f} GB as float32), over the {settings.cache_bytes() / 2**30:.1f} GB "
            "one view reads (ATTNVIZ_CACHE_MB raises it); attnviz.notebook.show(model, tokenizer, text) reads any "
            "length up to 8,192 tokens in bounded memory"
        )
    for i, w in enumerate(layers):
        if not bool(torch.isfinite(w).all()) or float(w.min()) < 0:
            raise GivenWeightsError(f"{name}[{i}] holds values that are not weights (negative, NaN or infinite)")
        if float(w.sum(dim=-1).max()) > 1 + ROW_SUM_SLACK:
            raise GivenWeightsError(
                f"{name}[{i}] has a row summing to {float(w.sum(dim=-1).max()):.4f}, past 1 (dropout in the pass? "
                "call model.eval() before it)"
            )
    return layers


def given_record(
    layers: Sequence[Tensor],
    tokens: Sequence[str],
    *,
    key_tokens: Sequence[str] | None = None,
    kind: str = "self",
    stack: str = "",
    model_name: str = "",
    implementation: str = "weights given",
) -> AttentionRecord:
    """An :class:`AttentionRecord` of ``layers`` (each (n_head, q, k), from :func:`layer_weights`) over ``tokens``
    (the queries' strings; ``key_tokens`` the keys' for cross-attention). A self-attention stack whose every weight
    above the diagonal is zero is read as causal."""
    n_head, q_len, k_len = layers[0].shape
    cross = kind == "cross"
    above = torch.ones(q_len, k_len, dtype=torch.bool).triu(1)
    causal = not cross and q_len == k_len and all(not bool(w[:, above].any()) for w in layers)
    bin_size = pool_bin(q_len, len(layers) * n_head)
    captures = []
    for w in layers:
        if cross:  # its own reading: each row's alignment to the source too (attnviz.core.capture.cross)
            captures.append(capture_cross(w, k_len, bin_size=bin_size, scale=math.nan))
        else:
            captures.append(capture_weights(w, eager_keys(w, causal, 0, k_len), bin_size=bin_size, scale=math.nan))
    return AttentionRecord(
        model_name=model_name,
        tokens=[Token(str(text), 0, 0) for text in tokens],
        layers=captures,
        n_kv_head=n_head,
        causal=causal,
        implementation=implementation,
        n_input_tokens=q_len,
        kind=kind,
        stack=stack,
        key_tokens=None if key_tokens is None else [Token(str(text), 0, 0) for text in key_tokens],
    )

"""Records whose heads have known roles: a sink, the previous token, itself, a local window, every key."""

import functools

import torch

from attnviz.core.capture import capture_attention
from attnviz.core.masks import KeyRanges
from attnviz.core.tokenizer import Token
from attnviz.models.record import AttentionRecord

T = 24  # long enough that a uniform head's rows spread beyond the local window


def pattern(kind: str, n: int = T) -> torch.Tensor:
    """Causal target weights (n, n) of one head whose role is known."""
    weights = torch.zeros(n, n)
    for i in range(n):
        if kind == "sink":
            weights[i, 0] = 1.0
        elif kind == "previous-token":
            weights[i, max(0, i - 1)] = 1.0
        elif kind == "self":
            weights[i, i] = 1.0
        elif kind == "uniform":
            weights[i, : i + 1] = 1.0 / (i + 1)
    return weights


def record_of(heads: list[list[torch.Tensor]]) -> AttentionRecord:
    """A causal record whose layer l, head h has weights heads[l][h] (n, n), up to softmax rounding.

    With k the identity and scale 1, q's rows are the scores, so q = log(weights) gives them back.
    """
    n = heads[0][0].shape[0]
    keys = KeyRanges.causal(n)
    layers = []
    for layer in heads:
        q = torch.stack(layer).clamp_min(1e-12).log().clamp_min(-60.0)  # (n_head, n, n): head_dim = n
        k = torch.eye(n).expand(len(layer), n, n)  # (n_head, n, n)
        _, capture = capture_attention(q, k, k.clone(), keys, scale=1.0, bin_size=1)
        layers.append(capture)
    tokens = [Token(f"t{i}", i, i + 1) for i in range(n)]
    return AttentionRecord(
        "hand-made", tokens, layers, n_kv_head=len(heads[0]), causal=True, implementation="test", n_input_tokens=n
    )


KINDS = ["sink", "previous-token", "self", "uniform"]


@functools.cache
def known_roles_record() -> AttentionRecord:
    """Two layers, each with one head of every kind in KINDS; read-only, so the tests share one."""
    return record_of([[pattern(kind) for kind in KINDS], [pattern(kind) for kind in KINDS]])

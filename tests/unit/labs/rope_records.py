"""Records whose q and k went through RoPE, for the tests of what a head's logit is made of."""

import torch

from attnviz.core.capture import capture_attention
from attnviz.core.masks import KeyRanges
from attnviz.core.rope import apply_rope, rope_cos_sin, rope_inverse_frequencies
from attnviz.core.tokenizer import Token
from attnviz.models.record import AttentionRecord


def rope_record(n_tok: int = 40, n_head: int = 4, n_kv_head: int = 2, head_dim: int = 16, softcap=None, theta=10000.0):
    """A one-layer causal record whose q and k went through RoPE."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(n_head, n_tok, head_dim, generator=gen)  # (n_head, T, head_dim)
    k = torch.randn(n_kv_head, n_tok, head_dim, generator=gen)  # (n_kv_head, T, head_dim)
    v = torch.randn(n_kv_head, n_tok, head_dim, generator=gen)
    inv_freq = rope_inverse_frequencies(head_dim, theta)
    cos, sin = rope_cos_sin(torch.arange(n_tok), inv_freq)  # (T, head_dim)
    q, k = apply_rope(q[None], cos, sin)[0], apply_rope(k[None], cos, sin)[0]
    _, capture = capture_attention(
        q, k, v, KeyRanges.causal(n_tok), scale=head_dim**-0.5, bin_size=1, softcap=softcap, keep_qk=True
    )
    tokens = [Token(f"t{i}", i, i + 1) for i in range(n_tok)]
    return AttentionRecord("hand-made", tokens, [capture], n_kv_head, True, "test", n_tok), inv_freq

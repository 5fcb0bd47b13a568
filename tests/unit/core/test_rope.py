"""RoPE: rotations keep lengths, and q·k depends only on the distance between positions."""

import torch

from attnviz.core.rope import apply_rope, rope_cos_sin, rope_inverse_frequencies, rope_rotation
from tests.tolerances import derived_bound


def test_rotation_keeps_norms_and_position_zero_is_identity():
    x = torch.randn(1, 2, 5, 8)
    cos, sin = rope_cos_sin(torch.arange(5), rope_inverse_frequencies(8, 10000.0))
    y = apply_rope(x, cos, sin)
    # a float32 rotation (2 products a component) then a norm of 8 squares, against the norm of x
    tol = derived_bound("float32", float(x.norm(dim=-1).max()), 2 + 8)
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1), atol=tol, rtol=0)
    assert torch.allclose(y[:, :, 0], x[:, :, 0])


def test_dot_product_depends_only_on_relative_position():
    rotate = rope_rotation(16, 10000.0)
    q = torch.randn(1, 1, 1, 16)
    k = torch.randn(1, 1, 1, 16)

    def score(p_q, p_k):
        rq, _ = rotate(q, q, torch.tensor([p_q]))
        rk, _ = rotate(k, k, torch.tensor([p_k]))
        return (rq * rk).sum().item()

    # float32 angles up to 12 rad round by eps·12 relative, moving each rotated component by as much; a score sums
    # 16 products of size up to |q|·|k|
    tol = derived_bound("float32", 12 * float(q.norm() * k.norm()), 16)
    assert abs(score(5, 3) - score(12, 10)) <= tol
    assert abs(score(5, 3) - score(5, 4)) > tol

"""The family's reductions choose their wide dtype in one place, :func:`attnviz.core.attention.reduction_dtype`:
float64 on the host (the numbers the pages and the CLI show, bit for bit), float32 on a device without float64
(MPS), where a hard-coded float64 would be a traceback.

Two ways to see it without an MPS machine: on a fake ``cuda`` that has no float64 (``FakeCuda(float64=False)``),
for the reductions that read nothing on the host; and, for the sweep's two fast reductions that do read on the host
(which positions moved past BIG_CHANGE), on the CPU with ``reduction_dtype`` answering float32 as it does for MPS
and any float64 tensor made refused: whatever the family still made in float64 on its own would fail here.
"""

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from attnviz.core.attention import reduction_dtype
from attnviz.labs.heads_matter import reductions
from attnviz.labs.heads_matter.reductions import (
    cosine_distance,
    head_reduction,
    kl_divergence,
    kl_rows,
    kl_through_head,
    next_token_losses,
    reduction_of,
    top_tokens,
)
from tests.fake_device import DEVICE, FakeCuda
from tests.tolerances import derived_bound

T, VOCAB, D, ROWS = 9, 300, 16, 3


class NoFloat64(TorchFunctionMode):
    """Refuses any torch call that returns a float64 tensor, as a device without float64 does."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        made, _ = tree_flatten(out)
        if any(isinstance(t, torch.Tensor) and t.dtype == torch.float64 for t in made):
            raise TypeError(f"{getattr(func, '__name__', func)}() made a float64 tensor")
        return out


def inputs():
    g = torch.Generator().manual_seed(0)
    before = torch.randn(T, VOCAB, generator=g) * 3  # (T, vocab)
    after = before[None] + torch.randn(ROWS, T, VOCAB, generator=g) * 0.05  # (R, T, vocab)
    after[1, 4] += torch.randn(VOCAB, generator=g) * 40  # a position past BIG_CHANGE: reduced the direct way
    after[2] = before  # nothing changed: KL 0 exactly
    ids = torch.randint(0, VOCAB, (T,), generator=g).tolist()
    weight, bias = torch.randn(VOCAB, D, generator=g) * 0.3, torch.randn(VOCAB, generator=g) * 0.1
    read = torch.randn(T, D, generator=g)  # what the LM head reads, (T, d)
    reads = read[None] + torch.randn(ROWS, T, D, generator=g) * 0.02  # (R, T, d)
    reads[1, 3] += torch.randn(D, generator=g) * 30
    reads[2] = read
    return before, after, ids, weight, bias, read, reads


def everything(before, after, ids, weight, bias, read, reads) -> dict[str, torch.Tensor]:
    """Every reduction of the family on the same inputs, by name."""
    head = head_reduction(reduction_of(torch.nn.functional.linear(read, weight, bias)), weight, bias)
    kl, losses = kl_rows(before, after, ids=ids)
    through, through_losses = kl_through_head(reads, head, ids=ids, block=64)
    return {
        "next_token_losses": next_token_losses(before, ids),
        "kl_divergence": kl_divergence(before, after[0]),
        "kl_rows": kl,
        "kl_rows losses": losses,
        "kl_through_head": through,
        "kl_through_head losses": through_losses,
        "cosine_distance": cosine_distance(read, reads),
        "top_tokens": top_tokens(before)[1],
    }


def test_the_reduction_dtype_is_float64_on_the_host_and_float32_on_mps():
    assert reduction_dtype("cpu") == reduction_dtype(torch.device("cpu")) == torch.float64
    assert reduction_dtype(torch.device("mps")) == reduction_dtype("mps:0") == torch.float32  # MPS has no float64
    assert reduction_dtype(torch.device("cuda", 1)) == torch.float32  # float64 runs at a fraction of float32's speed


def test_on_the_host_every_reduction_is_float64():
    found = everything(*inputs())
    assert {name: value.dtype for name, value in found.items()} == dict.fromkeys(found, torch.float64)


def test_the_reductions_on_a_device_without_float64_make_none_there():
    before, after, ids, weight, bias, read, _ = inputs()
    with torch.no_grad(), FakeCuda(float64=False):
        b, a, w, bb, r = (x.to("cuda") for x in (before, after[0], weight, bias, read))
        found = {
            "next_token_losses": next_token_losses(b, ids),
            "kl_divergence": kl_divergence(b, a),
            "reduction_of": reduction_of(b).lse,
            "head_reduction": head_reduction(reduction_of(b), w, bb).mean_row,
            "cosine_distance": cosine_distance(r, r),
            "top_tokens": top_tokens(b)[1],
        }
    assert {name: (value.device, value.dtype) for name, value in found.items()} == dict.fromkeys(
        found, (DEVICE, torch.float32)
    )


def test_with_float32_as_on_mps_no_float64_is_made_and_the_values_agree(monkeypatch):
    given = inputs()
    wide = everything(*given)  # float64, the host's
    monkeypatch.setattr(reductions, "reduction_dtype", lambda device: torch.float32)  # what MPS answers
    with NoFloat64():
        narrow = everything(*given)
    _, after, _, weight, bias, _, reads = given
    # every value is a log-normaliser or a sum over the vocabulary of terms no larger than the largest logit: the
    # same arithmetic in float32 rounds by eps x that x sqrt(vocabulary) (a cosine: by eps, far below)
    largest = max(float(after.abs().max()), float(torch.nn.functional.linear(reads, weight, bias).abs().max()))
    bound = derived_bound("float32", largest, VOCAB)
    for name, value in narrow.items():
        assert value.dtype == torch.float32, name
        assert float((value.double() - wide[name]).abs().max()) <= bound, name
    assert narrow["kl_rows"][2].tolist() == [0.0] * T and narrow["kl_through_head"][2].tolist() == [0.0] * T


def test_the_mode_refuses_what_it_is_for():
    with NoFloat64(), pytest.raises(TypeError, match="float64"):
        torch.zeros(2).double()

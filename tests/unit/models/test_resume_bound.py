"""The resume check's bound (:func:`attnviz.models.resume.resume_bound`): derived from the dtype, the depth the resumed
pass ran and the device, so that another batch shape's rounding in bfloat16 on CUDA does not switch resuming off,
while a pass that resumed wrongly (another text's outputs: off by their own size) is still caught."""

import pytest
import torch

from attnviz.models.resume import outputs_match, resume_bound

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SIZES = [(1, 64), (12, 2048), (40, 8192), (80, 8192)]  # (layers the resumed pass ran, d_model): tiny to a 70B


def _one_ulp_up(x: torch.Tensor) -> torch.Tensor:
    """``x`` with its largest |value| moved by one unit in the last place of its dtype."""
    flat = x.flatten().clone()
    at = int(flat.abs().argmax())
    flat[at] = torch.nextafter(flat[at].float(), torch.tensor(float("inf"))).to(x.dtype)
    if flat[at] == x.flatten()[at]:  # nextafter in float32 rounds back in a narrower dtype: one step of its own
        flat[at] = flat[at] + torch.finfo(x.dtype).eps * flat[at].abs() * 2
    return flat.reshape(x.shape)


@pytest.mark.parametrize("dtype", DTYPES)
def test_equal_outputs_match_and_other_shapes_do_not(dtype):
    x = (torch.randn(3, 7, 50, generator=torch.Generator().manual_seed(0)) * 20).to(dtype)
    assert outputs_match(x, x.clone())
    assert not outputs_match(x, x[:, :-1])


@pytest.mark.parametrize(("layers", "d_model"), SIZES)
def test_one_rounding_step_of_bfloat16_on_cuda_keeps_resuming_on(layers, d_model):
    """The old bound, 1e-5 of the scale, refused a single bfloat16 rounding step (2**-8 of it): resuming was off."""
    scale = 20.0
    one_step = torch.finfo(torch.bfloat16).eps * scale
    assert 1e-5 * scale < one_step  # what switched it off
    assert resume_bound(torch.bfloat16, "cuda", scale, layers, d_model) >= 4 * one_step
    assert resume_bound(torch.float16, "cuda", scale, layers, d_model) >= 4 * torch.finfo(torch.float16).eps * scale


@pytest.mark.parametrize("device", ["cpu", "cuda", "mps"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("layers", "d_model"), SIZES)
def test_a_wrong_resume_is_caught_in_every_dtype_and_depth(dtype, device, layers, d_model):
    """Another text's outputs differ by their own size: half the scale is beyond the bound everywhere."""
    assert resume_bound(dtype, device, 20.0, layers, d_model) < 0.5 * 20.0


def test_the_bound_grows_with_depth_and_scale_and_shrinks_with_precision():
    bound = lambda dtype, layers=12, scale=1.0: resume_bound(dtype, "cpu", scale, layers, 2048)  # noqa: E731
    assert bound(torch.bfloat16, 40) > bound(torch.bfloat16, 12)
    assert bound(torch.bfloat16, scale=30.0) == pytest.approx(30 * bound(torch.bfloat16))
    assert bound(torch.bfloat16) > bound(torch.float16) > bound(torch.float32) > bound(torch.float64)
    assert bound(torch.float32, scale=0.01) == bound(torch.float32)  # small outputs: bounded as of size 1


def test_cuda_kernels_that_round_more_widen_it(monkeypatch):
    """TF32 (opted into) for float32; bfloat16's split-K partial sums added in bfloat16 (torch's default)."""
    plain = resume_bound(torch.float32, "cuda", 1.0, 12, 2048)
    assert plain == resume_bound(torch.float32, "cpu", 1.0, 12, 2048)
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    assert resume_bound(torch.float32, "cuda", 1.0, 12, 2048) > 100 * plain
    assert resume_bound(torch.float32, "cpu", 1.0, 12, 2048) == plain  # a CPU never uses TF32
    assert resume_bound(torch.bfloat16, "cuda:1", 1.0, 12, 2048) > resume_bound(torch.bfloat16, "cpu", 1.0, 12, 2048)


@pytest.mark.parametrize("dtype", DTYPES)
def test_outputs_match_within_the_bound_and_not_beyond(dtype):
    g = torch.Generator().manual_seed(1)
    before = (torch.randn(2, 5, 300, generator=g) * 10).to(dtype)
    assert outputs_match(before, _one_ulp_up(before), layers=12, d_model=256)
    wrong = (torch.randn(2, 5, 300, generator=g) * 10).to(dtype)  # another text's outputs
    assert not outputs_match(before, wrong, layers=12, d_model=256)
    scale = float(before.float().abs().max())
    bound = resume_bound(dtype, "cpu", scale, 12, 256)
    beyond = before.float().clone()
    beyond[0, 0, 0] += 2 * bound
    assert not outputs_match(before.float(), beyond, layers=12, d_model=256)


def test_float32_on_the_cpu_is_still_near_exact():
    """One layer of a tiny model: within 1e-5 of the scale, as before (a 1e-4 difference is refused)."""
    assert resume_bound(torch.float32, "cpu", 1.0, 1, 64) <= 1e-5
    before = torch.randn(1, 4, 64, generator=torch.Generator().manual_seed(2))
    after = before.clone()
    after[0, 0, 0] += 1e-4 * float(before.abs().max())
    assert not outputs_match(before, after, layers=1, d_model=64)

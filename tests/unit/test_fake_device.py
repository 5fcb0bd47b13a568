"""Device hygiene without a GPU: the attention core, the masks, the capture kernel and ablation on a fake ``cuda``.

Every case runs under :class:`tests.fake_device.FakeCuda`: a CPU tensor mixed with a device one fails as it would
on a GPU, and a device tensor read on the host (a wait for the GPU) raises :class:`~tests.fake_device.HostSyncError`.
The checks assert where results land (the device, or the host for what a capture keeps) and how often a layer's
results cross to the host: once, whatever the number of chunks.
"""

import pytest
import torch

from attnviz.core import attention
from attnviz.core import masks as M
from attnviz.core.capture import CaptureSession, capture_attention, capture_weights
from attnviz.core.capture import kernel as capture_kernel
from attnviz.core.masks import KeyRanges
from attnviz.core.value_norms import projection_factors
from attnviz.models.ablation import ablate_output, ablation_hooks
from tests.fake_device import DEVICE, FakeCuda, HostSyncError, devices_of

N_HEAD, HEAD_DIM, T = 4, 8, 11


def qkv(n_kv_head=2, q_len=T, k_len=T, batch=2, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(batch, N_HEAD, q_len, HEAD_DIM, generator=g).to(DEVICE, dtype)
    k = torch.randn(batch, n_kv_head, k_len, HEAD_DIM, generator=g).to(DEVICE, dtype)
    v = torch.randn(batch, n_kv_head, k_len, HEAD_DIM, generator=g).to(DEVICE, dtype)
    return q, k, v


@pytest.fixture
def fake():
    with torch.no_grad(), FakeCuda() as mode:
        yield mode


# the harness itself: it must catch what it is for


MIXES = {
    "add": (torch.float32, lambda x: x + torch.ones(T)),
    "matmul": (torch.float32, lambda x: x @ torch.ones(T, 2)),
    "masked_fill": (torch.float32, lambda x: x.masked_fill(~torch.ones(T, T, dtype=torch.bool), 0.0)),
    "where": (torch.float32, lambda x: torch.where(torch.ones(T, T, dtype=torch.bool), x, 0.0)),
    "and": (torch.bool, lambda x: x & torch.ones(T, T, dtype=torch.bool)),  # through a meta twin
    "cat": (torch.float32, lambda x: torch.cat([x, torch.zeros(1, T)])),
}


@pytest.mark.parametrize("mix", list(MIXES))
def test_the_fake_device_catches_a_cpu_tensor_mixed_in(fake, mix):
    dtype, op = MIXES[mix]
    with pytest.raises(RuntimeError, match="device"):
        op(torch.zeros(T, T, device=DEVICE, dtype=dtype))


@pytest.mark.parametrize(
    "read",
    [bool, int, float, lambda x: x.item(), lambda x: x.tolist(), lambda x: torch.equal(x, x), lambda x: range(x)],
)
def test_the_fake_device_catches_a_host_read(fake, read):
    with pytest.raises(HostSyncError):
        read(torch.ones((), dtype=torch.long, device=DEVICE))


def test_the_fake_device_lets_what_a_gpu_allows(fake):
    x = torch.zeros(T, T, device="cuda")
    x[0, :] = torch.ones(T)  # a CPU value copied into a device tensor
    y = x * torch.tensor(2.0) + 1  # CPU scalars
    assert y.device == DEVICE and y[1:, ::2].shape == (T - 1, 6)
    assert y.cpu().device.type == "cpu" and fake.transfers == ["cpu"]


# the attention core

MASKS = {
    "none": lambda: None,
    "bool": lambda: M.causal_mask(T, device="cuda"),
    "bool on the host": lambda: M.sliding_window_mask(T, 3),  # check_mask moves it
    "float": lambda: attention.mask_to_additive(M.causal_mask(T, device="cuda"), torch.float32),
    "float16 finfo.min": lambda: torch.zeros(T, T, dtype=torch.float16, device="cuda"),
    "key mask": lambda: torch.ones(T, dtype=torch.bool, device="cuda"),
    "padding": lambda: M.padding_mask([T, 5], T, side="left", device="cuda"),
    "document": lambda: M.document_mask([4, T - 4], device="cuda"),
}


def attend(path, q, k, v, **kwargs):
    if path == "fused":
        return attention.fused_attention(q, k, v, **kwargs)
    out, weights = attention.scaled_dot_product_attention(q, k, v, **kwargs)
    assert weights.device == DEVICE and weights.shape == (*q.shape[:-1], k.shape[-2])
    return out


@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("path", ["inspectable", "fused"])
def test_attention_stays_on_the_device(fake, path, mask):
    q, k, v = qkv()
    out = attend(path, q, k, v, mask=MASKS[mask](), is_causal=True)
    assert out.device == DEVICE and out.shape == q.shape and fake.transfers == []


@pytest.mark.parametrize("sinks", [False, True], ids=["", "sinks"])
@pytest.mark.parametrize("is_causal", [False, True], ids=["", "causal"])
@pytest.mark.parametrize("n_kv_head", [1, 4], ids=["MQA", "MHA"])
@pytest.mark.parametrize("path", ["inspectable", "fused"])
def test_every_variant_of_attention_stays_on_the_device(fake, path, n_kv_head, is_causal, sinks):
    q, k, v = qkv(n_kv_head, q_len=T - 3)  # queries after a cache
    sinks = torch.randn(N_HEAD).to(DEVICE) if sinks else None
    out = attend(path, q, k, v, mask=M.padding_mask([T, 6], T, device="cuda"), is_causal=is_causal, sinks=sinks)
    assert out.device == DEVICE and out.shape == q.shape and fake.transfers == []


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_attention_stays_on_the_device(fake, dtype):
    q, k, v = qkv(dtype=dtype)
    mask = M.causal_mask(T)  # on the host
    out, weights = attention.scaled_dot_product_attention(q, k, v, mask=mask)
    fused = attention.fused_attention(q, k, v, mask=attention.mask_to_additive(mask, torch.float32))
    assert {out.device, weights.device, fused.device} == {DEVICE} and out.dtype == fused.dtype == dtype


@pytest.mark.parametrize("need_weights", [True, False])
def test_a_module_decodes_with_its_cache_on_the_device(fake, need_weights):
    layer = attention.MultiHeadAttention(N_HEAD * HEAD_DIM, N_HEAD, n_kv_head=2).to(DEVICE)
    cache = attention.KVCache()
    x = torch.randn(2, T, N_HEAD * HEAD_DIM).to(DEVICE)
    out, _ = layer(x, x, x, kv_cache=cache, is_causal=True, need_weights=need_weights)
    step, weights = layer(x[:, -1:], x[:, -1:], x[:, -1:], kv_cache=cache, is_causal=True, need_weights=need_weights)
    assert out.device == step.device == DEVICE and len(cache) == T + 1 and cache.k.device == DEVICE
    assert weights is None or weights.shape == (2, N_HEAD, 1, T + 1)


# the masks


BUILDERS = {
    "causal": lambda d: M.causal_mask(5, 8, device=d),
    "sliding window": lambda d: M.sliding_window_mask(6, 2, device=d),
    "padding right": lambda d: M.padding_mask([3, 6], 6, device=d),
    "padding left": lambda d: M.padding_mask([3, 6], side="left", device=d),
    "prefix-LM": lambda d: M.prefix_lm_mask(6, 2, device=d),
    "documents": lambda d: M.document_mask([2, 3, 1], device=d),
    "documents, not causal": lambda d: M.document_mask([2, 3, 1], causal=False, device=d),
    "padded batch": lambda d: M.batch_padding_keep([2, 6], 6, side="left", causal=True, device=d),
    "positions": lambda d: M.positions_from_mask(M.padding_mask([2, 6], 6, side="left", device=d)[:, 0, 0]),
    "with causal": lambda d: attention.with_causal(M.padding_mask([3, 6], 6, device=d), 6, 6, d),
    "visible keys": lambda d: M.visible_keys(M.causal_mask(6, device=d), 6, 6),
    "masked cells": lambda d: M.masked_cells(torch.zeros(6, 6, device=d), torch.float16),
    "checked": lambda d: M.check_mask(torch.zeros(6, dtype=torch.float16), (1, 2, 6, 6), torch.ones(1, device=d)),
    "KeyRanges block": lambda d: KeyRanges.causal(6, window=2).block(1, 5, 0, 6, device=d),
}


@pytest.mark.parametrize("builder", list(BUILDERS))
def test_mask_builders_build_on_the_device_they_are_given(fake, builder):
    expected = BUILDERS[builder]("cpu")  # what the host builds, computed for real before the fake device is used
    built = BUILDERS[builder]("cuda")
    assert built.device == DEVICE and built.shape == expected.shape and built.dtype == expected.dtype
    assert fake.transfers == []


def test_key_ranges_read_a_device_mask_back_once(fake):
    keys = KeyRanges.from_mask(M.sliding_window_mask(40, 5, device="cuda"), rows_at_once=8)  # five chunks
    assert devices_of(keys) == {"cpu"} and keys.q_len == 40 and fake.transfers == ["cpu"]


# the capture kernel


def chunked(monkeypatch, rows: int | None) -> None:
    """Chunks of ``rows`` query rows on the device (None: the kernel's own budget, one chunk at these sizes)."""
    budget = capture_kernel.DEVICE_CHUNK_ELEMENTS if rows is None else N_HEAD * T * rows
    monkeypatch.setattr(capture_kernel, "DEVICE_CHUNK_ELEMENTS", budget)


CAPTURES = {
    "causal": (KeyRanges.causal(T), {}),
    "window": (KeyRanges.causal(T, window=3), {}),
    "left-padded": (KeyRanges.causal(T, start=4), {}),
    "right-padded encoder": (KeyRanges.span(T, 0, T - 3), {}),
    "documents": (KeyRanges.documents([4, T - 4]), {}),
    "after a cache": (KeyRanges.causal(T - 4, T), {}),
    "rows that see nothing": (
        KeyRanges(torch.tensor([0] * 4 + [2] * (T - 4)), torch.tensor([0] * 4 + [T] * (T - 4)), T),
        {},
    ),
    "sinks": (KeyRanges.causal(T), {"sinks": lambda: torch.randn(N_HEAD).to(DEVICE)}),
    "value norms": (
        KeyRanges.causal(T),
        {"out_factors": lambda: projection_factors(torch.randn(N_HEAD, HEAD_DIM, 24)).to(DEVICE)},
    ),
    "softcap": (KeyRanges.causal(T), {"softcap": lambda: 5.0}),
    "not keeping q and k": (KeyRanges.causal(T), {"keep_qk": lambda: False}),
}


@pytest.mark.parametrize("case", list(CAPTURES))
def test_the_capture_reads_nothing_back_inside_its_loop(fake, monkeypatch, case):
    """No host read in any chunk; the layer's reduced results cross to the host once, however many chunks it took."""
    keys, extra = CAPTURES[case]
    q, k, v = (x[0] for x in qkv())
    q = q[:, -keys.q_len :]
    kwargs = {name: make() for name, make in extra.items()}
    transfers = []
    for rows in (None, 4):  # one chunk, then three
        chunked(monkeypatch, rows)
        fake.transfers.clear()
        out, capture = capture_attention(q, k, v, keys, scale=HEAD_DIM**-0.5, bin_size=2, **kwargs)
        assert out.device == DEVICE and out.shape == q.shape
        assert devices_of(capture) == {"cpu"}
        transfers.append(len(fake.transfers))
    kept = 0 if case == "not keeping q and k" else 2  # q and k
    kept += 2 if case in ("sinks", "value norms") else 0  # the sinks and their row; the value norms and theirs
    assert transfers == [7 + 3 + kept] * 2  # seven row statistics, three pooled maps


@pytest.mark.parametrize("rows", [None, 4], ids=["one chunk", "three chunks"])
def test_a_capture_from_full_weights_reads_back_once(fake, monkeypatch, rows):
    chunked(monkeypatch, rows)
    keys = KeyRanges.causal(T, window=4)
    weights = torch.rand(N_HEAD, T, T).to(DEVICE)
    sink_weight = torch.rand(N_HEAD, T).to(DEVICE)
    capture = capture_weights(weights, keys, bin_size=2, scale=0.3, sink_weight=sink_weight)
    assert devices_of(capture) == {"cpu"}
    assert len(fake.transfers) == 1 + 8 + 3 + 1  # the leak check, eight row statistics, three maps, the weights


def test_a_session_captures_a_batch_on_the_device(fake):
    q, k, v = qkv()
    session = CaptureSession(batch=2, q_len=T, n_heads_total=N_HEAD)
    out = session.attend(q, k, v, [KeyRanges.causal(T), KeyRanges.causal(T, start=3)], scale=0.3)
    assert out.device == DEVICE and out.shape == q.shape
    assert devices_of(session.layers) == {"cpu"}


# ablation


@pytest.mark.parametrize("heads_on", ["host", "device"])
@pytest.mark.parametrize("mode", ["zero", "mean", "first"])
def test_ablation_rewrites_heads_on_the_device(fake, mode, heads_on):
    output = torch.randn(2, T, N_HEAD, HEAD_DIM).to(DEVICE)
    value = torch.randn(2, 2, T, HEAD_DIM).to(DEVICE)
    heads = torch.tensor([[True, False, False, True], [False] * N_HEAD])
    out = ablate_output(output, value, heads if heads_on == "host" else heads.to(DEVICE), mode)
    assert out.device == DEVICE and out.shape == output.shape and fake.transfers == []


@pytest.mark.parametrize("mode", ["zero", "mean", "first"])
def test_a_pass_ablates_layer_by_layer_on_the_device(fake, mode):
    hooks = ablation_hooks([[(0, 1)], [(1, 2)], []], mode, N_HEAD)
    value = torch.randn(3, 2, T, HEAD_DIM).to(DEVICE)
    for layer in range(3):
        query, output = torch.randn(3, N_HEAD, T, HEAD_DIM).to(DEVICE), torch.randn(3, T, N_HEAD, HEAD_DIM).to(DEVICE)
        if "attn.qkv" in hooks:
            hooks["attn.qkv"](layer, query, value, value)
        assert hooks["attn.z"](layer, output).device == DEVICE
    assert fake.transfers == []

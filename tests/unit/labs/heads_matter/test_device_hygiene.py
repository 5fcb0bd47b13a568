"""The "which heads matter" labs' own side on the model's device, with no GPU: on a fake ``cuda`` (tests/fake_device.py).

Patching, the estimate and direct logit attribution call a source that runs a real model; here their side of it
(the metrics, the replacement of a head's output, the estimate's terms, direct logit attribution's products and
read-outs, the resume check, an ablation's per-position reductions) is given device tensors in bfloat16 as a model on a GPU gives them: no CPU tensor mixed
in, no value read on the host mid-way (a wait for the GPU), only reduced results brought back (counted), and on a
device without float64 (MPS, ``FakeCuda(float64=False)``) none made there. What cannot be checked here: the
estimate's backward (autograd on fake ``cuda`` tensors aborts a CPU-only torch build: its gradients are given), a
real model's pass, and the ablation sweep's KL of many rows (``kl_rows`` reads a value on the host per row and chunk,
``kl_through_head`` indexes by value per vocabulary block: both wait for the device, so they run on the host). Their
values on the CPU are checked elsewhere (test_patching, test_direct_logits_reference, test_graddrop); here also that
the CPU path is the arithmetic it was, bit for bit.
"""

import pytest
import torch
from torch import nn

from attnviz.core.tokenizer import Token
from attnviz.labs.heads_matter import attribution, direct_logits, patching, reductions
from attnviz.labs.heads_matter.patching import Metric, RunPair
from attnviz.labs.heads_matter.reductions import cosine_distance
from attnviz.models.hf.read_outs import ReadOut
from attnviz.models.readings import Reading
from attnviz.models.resume import outputs_match
from attnviz.models.source import Capability, EditsHeads, Encoding
from tests.fake_device import DEVICE, FakeCuda, Float64Error, devices_of

N_LAYER, N_HEAD, HEAD_DIM, T, VOCAB = 3, 4, 8, 6, 50
D_MODEL = N_HEAD * HEAD_DIM
METRICS = {
    "logit-diff": Metric("logit-diff", (" a", " b"), (3, 7)),
    "loss": Metric("loss"),
    "kl": Metric("kl"),
    "hidden": Metric("hidden"),
}
DEVICES = {"cuda": True, "mps (no float64)": False}  # FakeCuda's float64


class DeviceSource:
    """A source that edits heads, whose pass makes its tensors on the fake ``cuda`` in bfloat16 as a model there
    would: each layer's z (rows, T, n_head, head_dim) handed to the edit (what it returns kept), then the logits
    (or an encoder's last hidden states); ``read``: the read-out a pass with ``read=True`` returns. No model runs."""

    name = "device stub"
    n_head = N_HEAD

    def __init__(self, logits: bool = True, read: ReadOut | None = None):
        self.capabilities = frozenset({Capability.EDIT_HEADS, *([Capability.GENERATE] if logits else [])})
        self.logits, self.read = logits, read
        self.edited: list[torch.Tensor] = []

    def encode(self, text: str, max_tokens: int) -> Encoding:
        return Encoding(list(range(1, T + 1)), [Token(f"t{i}", i, i + 1) for i in range(T)], T)

    def token_ids(self, text: str) -> list[int]:
        return [7]

    def token_texts(self, ids) -> list[str]:
        return [f"<{i}>" for i in ids]

    def layer_cache(self, text: str, max_tokens: int, mode: str = "zero"):
        raise AssertionError("not called here")

    def head_pass(self, encoding, rows, edit, *, grad=False, resume=None, first_layer=0, read=False):
        for layer in range(first_layer, N_LAYER):
            z = torch.randn(rows, T, N_HEAD, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
            self.edited.append(edit(layer, z))
        out = torch.randn(rows, T, VOCAB if self.logits else D_MODEL, dtype=torch.bfloat16, device="cuda")
        return out, (self.read if read else None)

    def head_blocks(self):
        for _ in range(N_LAYER):
            yield torch.randn(N_HEAD, HEAD_DIM, D_MODEL, device="cuda"), None  # float32, as sources give W_O


def run_pair(metric: Metric) -> RunPair:
    """Two runs as :func:`patching.run_pair` keeps them: outputs and every layer's z float32 on the host."""
    g = torch.Generator().manual_seed(0)
    width = D_MODEL if metric.kind == "hidden" else VOCAB
    enc = DeviceSource().encode("", T)
    z = lambda: [torch.randn(T, N_HEAD, HEAD_DIM, generator=g) for _ in range(N_LAYER)]  # noqa: E731
    texts = [t.text for t in enc.tokens]
    return RunPair(
        "stub", tuple(enc.ids), enc, enc, texts, texts, metric, metric.kind != "hidden",
        torch.randn(T, width, generator=g), torch.randn(T, width, generator=g), z(), z(), 1.0, 0.0, None, N_HEAD,
    )  # fmt: skip


@pytest.fixture(params=list(DEVICES))
def fake(request):
    with torch.no_grad(), FakeCuda(float64=DEVICES[request.param]) as mode:
        yield mode


def test_the_stub_is_a_source_that_edits_heads():
    assert isinstance(DeviceSource(), EditsHeads)


def test_the_fake_device_without_float64_refuses_it():
    with torch.no_grad(), FakeCuda(float64=False), pytest.raises(Float64Error, match="float64"):
        torch.zeros(3, device="cuda").double()


@pytest.mark.parametrize("kind", list(METRICS))
def test_each_metric_reduces_on_the_device_against_the_clean_run_on_the_host(fake, kind):
    pair = run_pair(METRICS[kind])
    out = torch.randn(5, T, pair.clean_out.shape[-1], dtype=torch.bfloat16, device="cuda").float()  # (R, T, width)
    values = patching.metric_of(pair.metric, out, pair.clean_out, pair.clean_ids)
    assert values.device == DEVICE and values.shape == (5,) and values.dtype == torch.float32
    assert fake.transfers == []


@pytest.mark.parametrize("kind", list(METRICS))
def test_patching_heads_brings_back_one_value_a_row_once_a_pass(fake, kind):
    pair = run_pair(METRICS[kind])
    source = DeviceSource(logits=kind != "hidden")
    heads = [(0, 1), (1, 2), (2, 0), (2, 3)]
    values = patching.patch_piece(source, pair, heads)
    assert list(values) == heads and all(isinstance(v, float) for v in values.values())
    assert devices_of(source.edited) == {"cuda"}  # the clean run's z copied into the device's, never the reverse
    assert fake.transfers == ["cpu"]  # the rows' values, at once


def test_patching_positions_brings_back_one_value_a_set_once_a_pass(fake):
    pair = run_pair(METRICS["kl"])
    values = patching.patch_position_sets(DeviceSource(), pair, (1, 2), [[0], [2, 3], [5]])
    assert len(values) == 3 and fake.transfers == ["cpu"]


def test_the_estimates_terms_and_changes_stay_on_the_device(fake):
    z = torch.randn(T, N_HEAD, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    grad = torch.randn(T, N_HEAD, HEAD_DIM, device="cuda")
    for mode in ("zero", "mean"):
        terms = attribution._terms(attribution._ablation_change(z, mode), grad)
        assert terms.device == DEVICE and terms.shape == (T, N_HEAD)
    assert fake.transfers == []


def _gradients_on_the_device(source, encoding, rows, metric_fn, changes=None):
    """What :func:`attribution._gradients` gives on a GPU (every layer's z and gradient, float32 where the layer ran),
    its metric computed on the device's outputs: its backward cannot run on a fake device."""
    zs, grads = ([torch.randn(rows, T, N_HEAD, HEAD_DIM, device="cuda") for _ in range(N_LAYER)] for _ in range(2))
    out = torch.randn(rows, T, VOCAB if source.logits else D_MODEL, dtype=torch.bfloat16, device="cuda")
    assert metric_fn(out).device == DEVICE
    return zs, grads, out, None


@pytest.mark.parametrize("kind", ["patching", "ablation of an LM", "ablation of an encoder"])
def test_the_estimate_reduces_each_layer_where_it_ran_and_brings_back_its_terms_once(fake, monkeypatch, kind):
    monkeypatch.setattr(attribution, "_gradients", _gradients_on_the_device)
    monkeypatch.setattr(attribution, "saturated_heads", lambda *args: [])  # a record's statistics: tested elsewhere
    source = DeviceSource(logits=kind != "ablation of an encoder")
    if kind == "patching":
        estimate = attribution.estimate_patching(source, run_pair(METRICS["kl"]), "", "")
    else:
        estimate = attribution.estimate_ablation(source, "text", 16, mode="mean")
    assert len(estimate.values) == N_LAYER and all(len(row) == N_HEAD for row in estimate.values)
    assert len(fake.transfers) == N_LAYER  # each layer's (T, n_head) terms, or an encoder's (n_head,) squares


def test_a_cosine_distance_reduces_on_the_device_against_a_baseline_on_the_host(fake):
    a, b = torch.randn(2, 3, T, D_MODEL, dtype=torch.bfloat16, device="cuda")
    assert cosine_distance(a, b).device == DEVICE
    assert cosine_distance(torch.randn(T, D_MODEL), b).shape == (3, T) and fake.transfers == []


def test_the_per_position_reductions_of_an_ablation_stay_on_the_device(fake):
    """What an ablation's effect (an LM's, an encoder-decoder's target) reduces a position at a time: the baseline's
    distributions, next-token losses, KL and the top tokens, given logits on the device."""
    before, after = torch.randn(2, T, VOCAB, dtype=torch.bfloat16, device="cuda").float()
    reduction = reductions.reduction_of(before, positions=4)
    assert reduction.p.device == DEVICE and reduction.lse.device == DEVICE
    assert reductions.next_token_losses(after, list(range(T))).shape == (T - 1,)
    assert reductions.kl_divergence(before, after).device == DEVICE
    ids, probs = reductions.top_tokens(after)
    assert ids.device == DEVICE and probs.shape == (T, reductions.TOP_K) and fake.transfers == []


def test_the_resume_check_reads_its_three_numbers_back_at_once(fake):
    before = torch.randn(2, T, VOCAB, dtype=torch.bfloat16, device="cuda")
    assert outputs_match(before, before + 0, layers=2, d_model=D_MODEL)  # values read back as zeros: equal
    assert fake.transfers == ["cpu"]


def test_direct_logit_parts_are_reduced_where_each_layer_lives(fake):
    zs = [torch.randn(T, N_HEAD, HEAD_DIM, dtype=torch.bfloat16, device="cuda") for _ in range(N_LAYER)]
    direction = torch.randn(T, D_MODEL, dtype=torch.float64)  # on the host, as the frozen-scale reading gives it
    joins = (Reading.found(1.0),) * N_LAYER
    parts = direct_logits.head_parts(zs, DeviceSource().head_blocks(), direction, joins)
    assert parts.device.type == "cpu" and parts.dtype == torch.float64 and parts.shape == (T, N_LAYER, N_HEAD)
    assert len(fake.transfers) == N_LAYER  # each layer's (T, n_head) parts, once


def test_direct_logit_parts_on_the_cpu_are_the_hosts_float64_arithmetic_bit_for_bit():
    g = torch.Generator().manual_seed(3)
    zs = [torch.randn(T, N_HEAD, HEAD_DIM, generator=g).to(torch.bfloat16) for _ in range(N_LAYER)]
    blocks = [torch.randn(N_HEAD, HEAD_DIM, D_MODEL, generator=g) for _ in range(N_LAYER)]
    direction = torch.randn(T, D_MODEL, generator=g, dtype=torch.float64)
    joins = (Reading.found(1.0), Reading.found(0.22), Reading.not_applicable())
    parts = direct_logits.head_parts(zs, ((w, None) for w in blocks), direction, joins)
    for layer in range(N_LAYER):  # what direct_logit_attribution computed before, all on the host in float64
        back = torch.einsum("hkd,td->thk", blocks[layer].double(), direction)
        before = (zs[layer].double().cpu() * back).sum(dim=-1) * float(joins[layer].value)
        assert torch.equal(parts[:, layer], before)


def _read_out(head: nn.Module) -> ReadOut:
    """A read-out as :meth:`~attnviz.models.hf.read_outs.ReadOuts.of_pass` gives it on a GPU: an RMSNorm's input and output
    on the host, the logits on the device, the LM head left where it is."""
    g = torch.Generator().manual_seed(1)
    residual = torch.randn(T, D_MODEL, generator=g)
    gain = torch.rand(D_MODEL, generator=g) + 0.5
    normed = residual / (residual.pow(2).mean(dim=-1, keepdim=True) + 1e-6).sqrt() * gain
    logits = torch.randn(T, VOCAB, dtype=torch.bfloat16, device="cuda")
    return ReadOut(
        residual, normed, "RMSNorm", gain, None, 1e-6, head, logits, dtype=torch.bfloat16,
        join_scales=(Reading.found(1.0),) * N_LAYER,
    )  # fmt: skip


def _lm_head(bias: bool) -> nn.Linear:
    head = nn.Linear(D_MODEL, VOCAB, bias=bias)
    head.weight = nn.Parameter(head.weight.detach().to("cuda", torch.bfloat16), requires_grad=False)
    if bias:
        head.bias = nn.Parameter(head.bias.detach().to("cuda", torch.bfloat16), requires_grad=False)
    return head


@pytest.mark.parametrize("bias", [False, True], ids=["no bias", "bias"])
def test_the_lm_head_gives_only_the_rows_asked_for_on_its_device(fake, bias):
    weight, row_bias = _read_out(_lm_head(bias)).unembedding_rows([7, 2])
    assert weight.shape == (2, D_MODEL) and weight.device == DEVICE and weight.dtype == torch.bfloat16
    assert (row_bias is not None) == bias and (row_bias is None or row_bias.shape == (2,))
    assert fake.transfers == []


@pytest.mark.parametrize("token", [None, " b"], ids=["top token", "named token"])
def test_direct_logit_attribution_brings_back_only_reduced_numbers(fake, token):
    source = DeviceSource(read=_read_out(_lm_head(bias=False)))
    result = direct_logits.direct_logit_attribution(source, "text", 16, token=token)
    assert devices_of(result) == {"cpu"} and result.per_head.shape == (T, N_LAYER, N_HEAD)
    # the top token's id (when none is named), the token's LM head row, each layer's parts, the token's logits
    assert len(fake.transfers) == (token is None) + 1 + N_LAYER + 1


def test_a_bias_of_the_lm_head_crosses_as_one_number(fake):
    source = DeviceSource(read=_read_out(_lm_head(bias=True)))
    direct_logits.direct_logit_attribution(source, "text", 16, token=" b")
    assert len(fake.transfers) == 1 + 1 + N_LAYER + 1  # the row's weight and its bias, each one crossing

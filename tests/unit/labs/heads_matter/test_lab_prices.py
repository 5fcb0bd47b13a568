"""Each "which heads matter" lab states its price beside its code (host bytes, device bytes, seconds on the source's
device), and the pages ask the lab: the host bytes are the ones the pages priced by hand before, the device's are
the same working set where the model runs on an accelerator (none on the CPU), and a quote's seconds are kept."""

from types import SimpleNamespace

import pytest

from attnviz.core.budget import request_cost
from attnviz.labs.heads_matter import ablation, attribution, direct_logits, effect, patching
from attnviz.labs.heads_matter.common import BACKWARD_PASSES, PASS_ROWS, lab_need
from attnviz.models.source import Capability


def shape(device: str) -> SimpleNamespace:
    """A source's description as the prices read it: 2 layers x 2 heads of 4, d_model 8, a vocabulary of 10."""
    return SimpleNamespace(
        n_layer=2,
        n_head=2,
        n_kv_head=2,
        head_dim=4,
        d_model=8,
        device=device,
        config=SimpleNamespace(vocab_size=10),
        capabilities=frozenset({Capability.GENERATE}),
    )


def test_on_the_cpu_the_labs_ask_for_the_bytes_the_pages_asked_for_and_no_device_memory():
    source = shape("cpu")
    forward = request_cost(2, 2, 2, 1, 24, device="cpu").seconds
    assert forward > 0
    needs = {
        "sweep": (ablation.sweep_need(source, 24), ablation.sweep_bytes(source, 24), 1 + 2 * PASS_ROWS),
        "estimate": (attribution.estimate_need(source, 24), attribution.estimate_bytes(source, 24), 1 + 2 + 1),
        "pair": (attribution.pair_estimate_need(source, 24), 2 * attribution.estimate_bytes(source, 24), 2 + 3 + 2),
        "patch": (patching.patch_need(source, 24), attribution.estimate_bytes(source, 24), 2),
    }
    for name, (need, nbytes, passes) in needs.items():
        assert (need.nbytes, need.device_nbytes, need.device) == (nbytes, 0, "cpu"), name
        assert need.seconds == pytest.approx(passes * forward), name
        assert not need.on_accelerator, name
    graddrop = attribution.estimate_need(source, 24, graddrop=True)
    assert graddrop.seconds == pytest.approx((1 + BACKWARD_PASSES * (1 + 2) + 1) * forward)  # a backward a layer more


def test_a_quoted_time_is_kept_and_an_accelerator_holds_the_working_set():
    source = shape("cuda:0")
    need = patching.patch_need(source, 24, seconds=3.5)
    assert (need.nbytes, need.device_nbytes, need.device, need.seconds) == (
        attribution.estimate_bytes(source, 24),
        attribution.estimate_bytes(source, 24),
        "cuda:0",
        3.5,
    )
    assert need.on_accelerator
    assert lab_need(source, 100, 24, 1.0, seconds=0.0).device_nbytes == 100


def test_direct_logits_are_priced_as_their_one_pass_not_as_a_capture_of_the_text():
    """T x (a layer's activations, every head's z, the logits, the stream before and after the norm) in float32,
    and every head's part and the direction in float64 on the host: no (T, T) attention map in it."""
    source = shape("cpu")
    T = 3
    on_pass = 4 * T * (12 * 8 + 2 * 2 * 4 + 10 + 2 * 8)
    host = 8 * T * (2 * 2 * 2 + 2 * 8)
    need = direct_logits.direct_logits_need(source, T)
    assert (need.nbytes, need.device_nbytes) == (on_pass + host, 0)
    long = direct_logits.direct_logits_need(source, 4096)
    assert long.nbytes == pytest.approx(need.nbytes * 4096 / T)  # linear in the tokens: nothing grows as T²
    assert need.seconds == pytest.approx(request_cost(2, 2, 2, 1, T, device="cpu").seconds)


def test_one_ablation_is_priced_as_its_two_passes_outputs():
    source = shape("cpu")
    need = effect.effect_need(source, 5)
    assert need.nbytes == 2 * 4 * 5 * 10 + 4 * 8 * 5 * 10  # (T, vocab) twice, and the float64 temporaries
    assert need.seconds == pytest.approx(2 * request_cost(2, 2, 2, 1, 5, device="cpu").seconds)

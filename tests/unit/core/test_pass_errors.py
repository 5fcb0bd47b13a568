"""Whose error it is when a pass fails: the model's own code, attnviz's (a bug, never relabelled), or the device's
memory (one line naming the device, its cache handed back). No model is loaded: tiny torch modules stand in for the
model's code, attnviz's own functions given what they cannot take for attnviz's."""

import gc
import sys

import pytest
import torch

from attnviz.core import pass_errors
from attnviz.core.attention import attention_scores, split_heads
from attnviz.core.capture.reading import _scores
from attnviz.core.pass_errors import Owner, error_in_pass, raised_by
from attnviz.errors import AttnvizBugError, ModelUnavailableError, OutOfMemoryError
from attnviz.models.source import running
from tests.fake_device import DEVICE, FakeCuda

CUDA_OOM = "CUDA out of memory. Tried to allocate 3.00 GiB. Of the allocated memory ..."  # names no GPU


class Broken(torch.nn.Module):
    """A model whose own forward fails: ``error`` raised after its layer ran, or its layer given the wrong width."""

    def __init__(self, error: BaseException | None = None):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.error = error

    def forward(self, x):
        if self.error is None:
            return self.proj(x[..., :3])  # a config whose shapes do not fit: raised in torch.nn, called by the model
        self.proj(x)
        raise self.error


def bad_heads():
    """attnviz's own code handed what it cannot take: an IndexError raised in attnviz (k has no head axis)."""
    return attention_scores(torch.zeros(1, 1, 2, 4), torch.zeros(4), 1.0)


def test_an_error_raised_in_the_models_forward_is_the_models_in_one_line():
    with pytest.raises(ModelUnavailableError) as caught, running("tiny"):
        Broken(RuntimeError("the model's own failure\nwith more lines"))(torch.zeros(2, 4))
    assert str(caught.value) == "tiny failed while running: the model's own failure"
    assert not isinstance(caught.value, AttnvizBugError) and isinstance(caught.value.__cause__, RuntimeError)


def test_torch_called_by_the_models_code_is_the_models():
    with (
        pytest.raises(ModelUnavailableError, match=r"^tiny failed while running: mat1 and mat2 shapes"),
        running("tiny"),
    ):
        Broken()(torch.zeros(2, 4))


def test_an_index_error_in_attnviz_code_is_a_bug_never_relabelled_as_the_models():
    with pytest.raises(AttnvizBugError) as caught, running("tiny"):
        bad_heads()
    text = str(caught.value)
    assert not isinstance(caught.value, ModelUnavailableError) and "failed while running" not in text
    assert text.startswith("a bug in attnviz (at attnviz/core/attention.py:") and "in attention_scores)" in text
    assert text.endswith("IndexError: tuple index out of range") and "\n" not in text
    assert isinstance(caught.value.__cause__, IndexError)  # the original, with its traceback, for the log


def test_torch_called_directly_by_attnviz_is_attnviz_even_when_the_model_called_attnviz():
    with pytest.raises(AttnvizBugError, match=r"split_heads\).*RuntimeError: shape"), running("tiny"):
        split_heads(torch.zeros(1, 2, 3), 2)
    model = Broken(RuntimeError("never reached"))
    model.proj.register_forward_hook(lambda module, args, out: bad_heads())  # attnviz's hook, called by the model
    with pytest.raises(AttnvizBugError, match="IndexError"), running("tiny"):
        model(torch.zeros(2, 4))


def test_a_device_bug_of_attnviz_on_a_fake_gpu_is_attnviz_and_the_models_is_the_models(monkeypatch):
    monkeypatch.setattr(pass_errors, "PLUMBING", pass_errors.PLUMBING | {"tests.fake_device"})  # it stands for torch
    with torch.no_grad(), FakeCuda():
        q = torch.zeros(1, 2, 3, 4).to(DEVICE)
        with pytest.raises(AttnvizBugError, match=r"attention_scores.*on the same device"), running("tiny", q.device):
            attention_scores(q, torch.zeros(1, 2, 3, 4), 1.0)  # k left on the CPU: attnviz's device bug
        model = Broken(None).to(DEVICE)
        with pytest.raises(ModelUnavailableError, match=r"^tiny failed while running"), running("tiny", DEVICE):
            model(torch.zeros(2, 4))  # the model's input on the CPU, its weights on the GPU: raised in torch.nn


@pytest.fixture
def freed(monkeypatch):
    """The calls that hand memory back: ``torch.cuda.empty_cache`` and ``gc.collect``."""
    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    real_collect = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *args: calls.append("gc.collect") or real_collect(*args))
    return calls


def test_out_of_memory_in_the_model_on_a_gpu_is_one_line_naming_it_and_the_cache_goes_back(freed):
    with torch.no_grad(), FakeCuda():
        model = Broken(torch.OutOfMemoryError(CUDA_OOM)).to(DEVICE)
        x = torch.zeros(2, 4).to(DEVICE)
        with pytest.raises(OutOfMemoryError) as caught, running("tiny", x.device):
            model(x)
    text = str(caught.value)
    assert text.startswith("out of memory on cuda:0: 3.00 GiB asked") and "\n" not in text
    assert "gc.collect" in freed and "empty_cache" in freed
    assert isinstance(caught.value, ModelUnavailableError)  # every place that shows a model's failure shows this


def test_out_of_memory_in_attnviz_code_is_the_same_line_not_a_bug(freed):
    q = torch.zeros(1, 1, 1).expand(2**20, 2**20, 1)  # views: nothing allocated until attnviz asks for 2**62 bytes
    k = torch.zeros(1, 1, 1).expand(1, 2**20, 1)
    with pytest.raises(OutOfMemoryError) as caught, running("tiny", "cpu"):
        _scores(q, k, 1.0, None)
    assert raised_by(caught.value.__cause__) is Owner.ATTNVIZ  # raised in attnviz's code, and still memory's
    assert str(caught.value).startswith("out of memory on cpu: 4,294,967,296.00 GiB asked")
    assert freed == ["gc.collect"]  # the CPU: nothing for CUDA's cache to hand back, no CUDA started


def test_a_memory_error_is_out_of_memory_on_the_host(freed):
    with pytest.raises(OutOfMemoryError, match=r"^out of memory on cpu: ") as caught, running("tiny", DEVICE):
        Broken(MemoryError())(torch.zeros(2, 4))
    assert isinstance(caught.value.__cause__, MemoryError) and "gc.collect" in freed


def test_the_cache_goes_back_on_a_cpu_only_machine_without_raising():
    from attnviz.core.devices import free_device_memory

    free_device_memory("cuda:0")  # torch's empty_cache is a no-op until CUDA starts; here it never does
    free_device_memory("cpu")


def test_errors_already_said_pass_unchanged_through_nested_passes_and_bugs_of_other_kinds_are_not_caught():
    said = ModelUnavailableError("already one line")
    with pytest.raises(ModelUnavailableError) as caught, running("outer"), running("inner"):
        raise said
    assert caught.value is said
    with pytest.raises(AttnvizBugError) as caught, running("outer"), running("inner"):
        bad_heads()
    assert isinstance(caught.value.__cause__, IndexError)  # the inner pass said it; the outer one kept it
    with pytest.raises(TypeError), running("tiny"):
        raise TypeError("a programming error outside the pass's kinds")


def test_a_file_system_error_is_the_models_whoever_opened_the_file():
    err = OSError("No space left on device")
    assert str(error_in_pass(err, "tiny")) == "tiny failed while running: No space left on device"


def test_an_error_with_no_traceback_is_the_models_and_a_frame_is_owned_by_its_module():
    assert raised_by(RuntimeError("never raised")) is Owner.MODEL
    assert pass_errors.frame_owner(sys._getframe()) is Owner.MODEL  # a test's code stands for the model's
    try:
        bad_heads()
    except IndexError as err:
        owners = [pass_errors.frame_owner(frame) for frame, _ in pass_errors.traceback_frames(err.__traceback__)]
    assert owners == [Owner.MODEL, Owner.MODEL, Owner.ATTNVIZ]  # this test, bad_heads, then attention_scores

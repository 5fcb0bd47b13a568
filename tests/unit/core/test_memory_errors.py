"""Out of memory is one line: which device, what was asked and free, and what to try; anything else passes."""

import pytest
import torch

from attnviz.core import devices, memory_errors
from attnviz.errors import ModelUnavailableError, OutOfMemoryError

CUDA_TEXT = (
    "CUDA out of memory. Tried to allocate 2.50 GiB. GPU 1 has a total capacity of 23.55 GiB of which 1.19 GiB is "
    "free. Including non-PyTorch memory, this process has 22.35 GiB memory in use.\nOf the allocated memory ..."
)
CPU_TEXT = (
    "[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: not enough memory: you tried to allocate "
    "68719476736 bytes."
)
MPS_TEXT = "MPS backend out of memory (MPS allocated: 17.00 GB, other allocations: 1.00 GB, max allowed: 18.13 GB)."


@pytest.mark.parametrize(
    "err, device, asked",
    [
        (torch.OutOfMemoryError(CUDA_TEXT), "cuda:1", 5 * 2**29),
        (RuntimeError(CPU_TEXT), "cpu", 2**36),
        (RuntimeError(MPS_TEXT), "mps", None),
        (MemoryError(), "cpu", None),
    ],
)
def test_each_way_of_running_out_is_recognised_and_said_in_one_line(err, device, asked):
    assert memory_errors.is_out_of_memory(err)
    assert memory_errors.asked_bytes(err) == asked
    said = memory_errors.one_line(err, "cuda:0" if device == "cpu" and not isinstance(err, MemoryError) else None)
    assert isinstance(said, OutOfMemoryError) and isinstance(said, ModelUnavailableError)
    text = str(said)
    assert "\n" not in text and text.startswith(f"out of memory on {device}: ")
    assert "fewer tokens" in text and "--device-map" in text and "bfloat16" in text
    if asked == 5 * 2**29:
        assert "2.50 GiB asked" in text


def test_the_cpu_says_how_much_is_free():
    text = str(memory_errors.one_line(RuntimeError(CPU_TEXT)))
    assert "64.00 GiB asked" in text and "unknown" not in text


@pytest.mark.parametrize(
    "err", [RuntimeError("mat1 and mat2 shapes cannot be multiplied"), ValueError("out of memory"), KeyError("x")]
)
def test_other_errors_are_not_out_of_memory(err):
    assert not memory_errors.is_out_of_memory(err)


def test_the_context_turns_only_out_of_memory_into_one_line(monkeypatch):
    freed = []
    monkeypatch.setattr(devices, "free_device_memory", lambda device=None: freed.append(device))
    with pytest.raises(OutOfMemoryError) as caught, memory_errors.memory_errors("cuda:0"):
        raise torch.OutOfMemoryError(CUDA_TEXT)
    assert freed == ["cuda:1"] and "out of memory on cuda:1" in str(caught.value)
    with pytest.raises(RuntimeError, match="shapes"), memory_errors.memory_errors("cpu"):
        raise RuntimeError("shapes")


def test_the_cli_says_out_of_memory_in_one_line_and_exits_2(monkeypatch, capsys):
    from attnviz import cli
    from attnviz.models.embedded.model import EmbeddedModel

    def out_of_memory(self, *args, **kwargs):
        raise torch.OutOfMemoryError(CUDA_TEXT)

    monkeypatch.setattr(EmbeddedModel, "run", out_of_memory)
    assert cli.main(["heads", "a short text", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("attnviz heads: error: out of memory on cuda:1: 2.50 GiB asked")


def test_loading_out_of_memory_is_one_line(monkeypatch, tmp_path):
    """transformers raising out of memory while it places the weights: the loader's one line, not 'could not load'."""
    import transformers

    from attnviz.models.hf.loading import load_hf_source

    def no_room(*args, **kwargs):
        raise RuntimeError(CPU_TEXT)

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", no_room)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_room)
    with pytest.raises(OutOfMemoryError, match=r"^out of memory on cpu: 64.00 GiB asked"):
        load_hf_source("minilm")

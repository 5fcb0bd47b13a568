"""Devices: "auto" picks the best one this machine has; a device it lacks, or a name it does not know, is refused."""

import pytest

from attnviz.core import devices


def test_auto_picks_the_first_available_and_the_cpu_is_always_there(monkeypatch):
    assert devices.available_devices()[-1] == "cpu"
    monkeypatch.setattr(devices, "available_devices", lambda: ["cuda", "cpu"])
    assert devices.resolve_device("auto") == "cuda" and devices.resolve_device("cpu") == "cpu"


def test_a_device_the_machine_lacks_is_refused_with_what_it_has(monkeypatch):
    monkeypatch.setattr(devices, "available_devices", lambda: ["cpu"])
    with pytest.raises(ValueError, match=r"'cuda'.*cpu"):
        devices.resolve_device("cuda")


def test_an_unknown_name_is_refused_with_the_choices():
    with pytest.raises(ValueError) as caught:
        devices.resolve_device("tpu")
    assert "'tpu'" in str(caught.value) and all(choice in str(caught.value) for choice in devices.DEVICE_CHOICES)


# ---- one GPU of several, dtypes, device maps and memory caps ---------------------------------------------------


def test_each_gpu_is_named_by_its_index_and_cuda_is_the_first(monkeypatch):
    monkeypatch.setattr(devices, "available_devices", lambda: ["cuda:0", "cuda:1", "cpu"])
    assert devices.resolve_device("auto") == "cuda"
    assert devices.resolve_device("cuda") == "cuda"
    assert devices.resolve_device("cuda:1") == "cuda:1"
    with pytest.raises(ValueError, match=r"'cuda:2'.*cuda:0, cuda:1, cpu"):
        devices.resolve_device("cuda:2")


@pytest.mark.parametrize("choice", ["cpu:0", "mps:1", "cuda:", "cuda:x", "gpu", "CUDA", "", "cuda:1234", None])
def test_device_names_outside_the_kinds_are_refused(choice):
    with pytest.raises(ValueError, match="cuda:N"):
        devices.check_device_choice(choice)


@pytest.mark.parametrize(
    "text, expected",
    [("20GiB", 20 * 2**30), ("512MB", 512 * 10**6), ("1.5GiB", 3 * 2**29), ("4096", 4096), (" 2 gib ", 2 * 2**30)],
)
def test_memory_sizes_read_units_both_ways(text, expected):
    assert devices.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "20 GB GB", "-1GiB", "0", "1e9", "20XB", "9" * 50])
def test_a_malformed_size_is_one_line(text):
    with pytest.raises(ValueError) as caught:
        devices.parse_size(text)
    assert "\n" not in str(caught.value) and "20GiB" in str(caught.value)


def test_max_memory_keeps_the_order_and_names_gpus_by_index():
    caps = devices.parse_max_memory("0=20GiB, 1=20GiB,cpu=64GiB,disk=1TB")
    assert caps == (("0", 20 * 2**30), ("1", 20 * 2**30), ("cpu", 64 * 2**30), ("disk", 10**12))
    assert devices.accelerate_max_memory(caps) == {0: 20 * 2**30, 1: 20 * 2**30, "cpu": 64 * 2**30, "disk": 10**12}


@pytest.mark.parametrize("text", ["", "cpu", "cpu=", "tpu=1GiB", "cpu=1GiB,cpu=2GiB", "0=1GiB,00=1GiB", "x" * 500])
def test_a_malformed_max_memory_is_one_line(text):
    with pytest.raises(ValueError) as caught:
        devices.parse_max_memory(text)
    assert "\n" not in str(caught.value)


def test_caps_and_an_offload_folder_need_a_device_map():
    assert devices.Placement("bfloat16", "auto", (("cpu", 2**30),), "/tmp/x").device_map == "auto"
    with pytest.raises(ValueError, match="device map"):
        devices.Placement("auto", None, (("cpu", 2**30),))
    with pytest.raises(ValueError, match="device map"):
        devices.Placement("auto", None, (), "/tmp/offload")
    with pytest.raises(ValueError, match="dtype must be one of auto, float32, bfloat16, float16"):
        devices.Placement("float64")
    with pytest.raises(ValueError, match="device map must be one of auto, balanced, sequential"):
        devices.Placement("auto", "everywhere")


def test_auto_takes_the_checkpoints_dtype_on_an_accelerator_and_float32_on_a_cpu_where_it_fits(monkeypatch):
    monkeypatch.setattr(devices, "host_free_bytes", lambda: 10 * 2**30)
    assert devices.resolve_dtype("auto", "cuda:0", "bfloat16") == "bfloat16"
    assert devices.resolve_dtype("auto", "mps", None) == "float32"  # a checkpoint that says none is float32
    assert devices.resolve_dtype("auto", "cpu", "bfloat16", float32_bytes=5 * 2**30) == "float32"  # half fits
    assert devices.resolve_dtype("auto", "cpu", "bfloat16", float32_bytes=5 * 2**30 + 1) == "bfloat16"
    assert devices.resolve_dtype("auto", "cpu", "float16", None) == "float32"  # size unknown: the fastest
    assert devices.resolve_dtype("float16", "cpu", "bfloat16") == "float16"  # a choice is a choice


def test_the_host_has_free_memory_and_a_cpu_says_so():
    free = devices.host_free_bytes()
    assert 0 < free == devices.device_free_bytes("cpu") or abs(free - devices.device_free_bytes("cpu")) < 2**28
    import torch

    if not torch.cuda.is_available():
        assert devices.device_free_bytes("cuda:0") is None  # no GPU on this build: it cannot say

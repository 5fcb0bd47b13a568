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

"""Choosing the torch device: auto picks CUDA, then Apple MPS, then the CPU."""

from __future__ import annotations

from attnviz.i18n.message import msg

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")


def available_devices() -> list[str]:
    """The devices this machine can run on, best first."""
    import torch  # here, not above: the CLI's parser reads DEVICE_CHOICES without importing torch

    found = []
    if torch.cuda.is_available():
        found.append("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return [*found, "cpu"]


def resolve_device(choice: str = "auto") -> str:
    """Turn a user's choice into a device that exists; ValueError if it does not."""
    if choice not in DEVICE_CHOICES:
        raise ValueError(msg("bounds.device_choice", choices=", ".join(DEVICE_CHOICES), choice=repr(choice)))
    available = available_devices()
    if choice == "auto":
        return available[0]
    if choice not in available:
        raise ValueError(msg("bounds.device_unavailable", choice=repr(choice), available=", ".join(available)))
    return choice

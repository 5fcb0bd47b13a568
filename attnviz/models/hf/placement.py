"""Where a Hugging Face model's weights go and in what dtype: the arguments ``from_pretrained`` gets for a
:class:`~attnviz.core.devices.Placement`, and what came of them (the device inputs go to, where each layer went).

A model on one device is loaded straight onto it (``device_map`` set to that device: no full copy in host memory
first). A model with a device map is spread by accelerate over the GPUs, then the CPU, then an offload folder on
disk, under ``max_memory``'s caps; its layers run where accelerate put them, each moving its weights to the
execution device for its forward pass, and the capture works on whatever device each layer's q and k are on.
"""

from __future__ import annotations

import re
from pathlib import Path

from attnviz.core.devices import (
    DTYPE_BYTES,
    Placement,
    accelerate_max_memory,
    dtype_name,
    resolve_dtype,
    torch_dtype,
)
from attnviz.i18n.message import Message, msg

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")
_LAYER = re.compile(r"^(.*?)(\d+)$")


def stored_dtype(config) -> str | None:
    """The dtype the checkpoint's config says its weights are stored in ("bfloat16"), None when it says none."""
    value = getattr(config, "dtype", None)  # transformers 5's name (torch_dtype, the old one, warns)
    if value is None:
        return None
    name = dtype_name(value)
    return name if name in DTYPE_BYTES else None


def checkpoint_dtype(source) -> str | None:
    """The dtype a loaded source's checkpoint stores its weights in, from its own config file (the loaded model's
    config says the dtype it runs in, which "auto" may have changed); None when it says none."""
    from transformers import AutoConfig

    try:
        return stored_dtype(AutoConfig.from_pretrained(source.source, local_files_only=True))
    except (OSError, ValueError, KeyError):  # a config only its remote code reads, or a hub id gone from disk
        return None


def weight_bytes(where: str) -> int | None:
    """The size of the weight files in folder ``where`` (None for a hub id not on disk)."""
    folder = Path(where)
    if not folder.is_dir():
        return None
    files = [f for f in folder.iterdir() if f.suffix in WEIGHT_SUFFIXES and f.is_file()]
    return sum(f.stat().st_size for f in files) or None


def chosen_dtype(placement: Placement, device: str, config, where: str) -> str:
    """The dtype the model will run in (:func:`attnviz.core.devices.resolve_dtype` with the checkpoint's own)."""
    stored = stored_dtype(config)
    size = weight_bytes(where)
    float32_bytes = None if size is None else size * 4 // DTYPE_BYTES.get(stored or "float32", 4)
    return resolve_dtype(placement.dtype, device, stored, float32_bytes)


def load_arguments(placement: Placement, device: str, dtype: str) -> dict:
    """``from_pretrained``'s keyword arguments for the dtype and the devices."""
    arguments: dict = {"dtype": torch_dtype(dtype)}
    if placement.device_map is None:
        arguments["device_map"] = device  # straight onto the device, no full host copy first
        return arguments
    arguments["device_map"] = placement.device_map
    if placement.max_memory:
        arguments["max_memory"] = accelerate_max_memory(placement.max_memory)
    if placement.offload_folder:
        arguments["offload_folder"] = placement.offload_folder
        arguments["offload_state_dict"] = True
    return arguments


def _device_text(where) -> str:
    """accelerate's device names as attnviz writes them: 0 -> "cuda:0"; "cpu", "disk", "mps" as they are."""
    if isinstance(where, int):
        return f"cuda:{where}"
    return str(where)


def device_map_of(model) -> dict[str, str]:
    """{module name: device} accelerate chose ("" for the whole model); {} for a model on one device."""
    mapping = getattr(model, "hf_device_map", None) or {}
    return {name: _device_text(where) for name, where in mapping.items()}


def is_split(model) -> bool:
    """Whether the model is spread over more than one device or offloaded (its weights not all in one place)."""
    return len(set(device_map_of(model).values())) > 1 or any(d == "disk" for d in device_map_of(model).values())


def main_device(model, fallback: str) -> str:
    """The device a model's inputs go to: accelerate's main device (the first GPU it uses, else the CPU) for a
    split model; else where its weights are."""
    mapping = device_map_of(model)
    if mapping:
        accelerators = [d for d in mapping.values() if d not in ("cpu", "disk")]
        return accelerators[0] if accelerators else "cpu"
    for parameter in model.parameters():
        return str(parameter.device) if parameter.device.type != "cpu" else "cpu"
    return fallback


def placement_runs(model) -> list[tuple[str, str]]:
    """Where each part of a split model went, consecutive layers on one device merged: [("model.layers.0–5",
    "cuda:0"), ("model.layers.6–11", "disk"), ...] in the model's order ("" is the whole model); [] for a model
    loaded onto one device."""
    mapping = device_map_of(model)
    if not mapping or (len(mapping) == 1 and next(iter(mapping.values())) not in ("cpu", "disk")):
        return []  # loaded onto one device, not by a device map
    runs: list[tuple[str, str, str, str]] = []  # (prefix, first index, last index, device)
    for name, device in mapping.items():
        found = _LAYER.match(name)
        prefix, index = (found.group(1), found.group(2)) if found else (name, "")
        if runs and found and runs[-1][0] == prefix and runs[-1][3] == device and runs[-1][2]:
            runs[-1] = (prefix, runs[-1][1], index, device)
        else:
            runs.append((prefix, index, index, device))
    return [(p + (f if f == last else f"{f}–{last}"), device) for p, f, last, device in runs]


def _bytes_text(n_bytes: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= size:
            return f"{n_bytes / size:,.1f} {unit}"
    return f"{n_bytes:,} B"


def _new_bytes(module, seen: set[int]) -> int:
    """The bytes of ``module``'s parameters not already in ``seen`` (which it adds them to)."""
    fresh = [p for p in module.parameters() if id(p) not in seen]
    seen.update(id(p) for p in fresh)
    return sum(p.numel() * p.element_size() for p in fresh)


def disk_note(model, name: str) -> Message | None:
    """What a device map left on disk, as one line: how many of the weights' bytes and of the layers (or of the
    map's parts, for a model it did not split by layer) accelerate offloaded, read back for every pass; None when
    nothing is on disk."""
    mapping = device_map_of(model)
    if "disk" not in mapping.values():
        return None
    seen: set[int] = set()  # a tied weight (the embedding and the LM head) counted once, where it first appears
    sizes = {part: _new_bytes(model.get_submodule(part), seen) for part in mapping}
    total = sum(sizes.values())
    on_disk = sum(size for part, size in sizes.items() if mapping[part] == "disk")
    layers = [part for part in mapping if _LAYER.match(part)]
    n_layers_on_disk = sum(mapping[part] == "disk" for part in layers)
    n_on_disk = sum(device == "disk" for device in mapping.values())
    if len(mapping) == 1:  # {"": "disk"}: not split at all
        counted = msg("placement.on_disk_whole")
    elif layers:
        counted = msg("placement.on_disk_layers", n=n_layers_on_disk, total=len(layers))
    else:
        counted = msg("placement.on_disk_parts", n=n_on_disk, total=len(mapping))
    return msg(
        "placement.on_disk",
        name=name,
        on_disk=_bytes_text(on_disk),
        total=_bytes_text(total),
        share=on_disk / total if total else 1.0,
        layers=counted,
    )


def model_dtype(model) -> str:
    """The dtype the model's floating-point weights are in ("bfloat16")."""
    for parameter in model.parameters():
        if parameter.is_floating_point():
            return dtype_name(parameter.dtype)
    return "float32"

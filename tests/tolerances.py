"""Tolerances by device kind and dtype (draft: being measured)."""

MEASURED: dict = {}
_LOOSE = {"weights": 1.0, "entropy": 1.0, "max_weight": 1.0, "pooled": 1.0, "parity": 1.0, "rope": 1.0}
TOLERANCE = {("cpu", "bfloat16"): _LOOSE, ("cpu", "float16"): _LOOSE, ("cpu", "float32"): _LOOSE}

"""How far attnviz may be from transformers' own eager attention, by device kind and dtype, and what was measured.

Whatever a model runs in, attnviz's capture computes scores, softmax and every statistic in float32 (from
``q.float()``), and its own layers (Parity, Walkthrough, the GQA what-if, the KV prefill) run in the model's
dtype with the softmax accumulated in float32. transformers' eager attention of a bfloat16 model rounds its
scores to bfloat16, softmaxes them (in float32 for Llama-style families, in bfloat16 for BERT) and rounds the
weights to bfloat16. So against eager, in low precision:

- ``weights``, ``max_weight`` and ``pooled`` (the pooled maps' max and mean) differ by eager's rounding: a weight
  near 1 is rounded by up to half an eps of the dtype (bfloat16: 2**-8 = 3.9e-3), plus what the rounded
  scores move; ``entropy`` (nats) sums such differences over a row;
- ``parity`` (our layers against the model's, weight by weight) is the same arithmetic in the same dtype,
  exact on this CPU but where a family's eager softmax runs in float16 (BERT: one float16 step, 3.1e-5); its
  bound in bfloat16 allows one rounding step of a weight below 0.5 (2**-9), for a CPU whose bfloat16 matmul
  instructions block our grouped (GQA) matmul and eager's repeated one differently;
- ``kv`` (the keys and values our layers cache against transformers' cache) is the same projection and the
  same RoPE in the same dtype: exact on the CPU.

Measured on the CPU (tests/integration/models/test_bfloat16.py: tiny random models saved in bfloat16, 80
tokens, two layers of four heads; the largest difference over every layer, head and row; torch 2.13,
transformers 5.24):

=============  =========  ========  ========  ==========  ========  ======
family         dtype      weights   entropy   max_weight  pooled    parity
=============  =========  ========  ========  ==========  ========  ======
llama          bfloat16   1.7e-3    2.3e-3    1.7e-3      9.3e-4    0
qwen2          bfloat16   1.4e-3    2.3e-3    1.4e-3      9.5e-4    0
gemma2         bfloat16   1.1e-3    2.5e-3    1.1e-3      8.8e-4    —
gpt2           bfloat16   1.9e-3    2.2e-3    1.9e-3      8.7e-4    —
bert           bfloat16   3.3e-5    1.9e-3    3.3e-5      3.3e-5    0
falcon (eager) bfloat16   0         0         0           0         —
llama          float16    2.3e-4    2.9e-4    2.3e-4      1.2e-4    0
bert           float16    4.2e-6    2.3e-4    4.2e-6      4.2e-6    0 (3.1e-5 on another text)
=============  =========  ========  ========  ==========  ========  ======

(— : our layers do not reproduce the family. The eager route records the model's own weights, so it equals
eager exactly; its statistics come from those weights upcast to float32.) The KV prefill measured 0 in both
dtypes. float32 on the CPU is exact for parity and the KV prefill, and within 1e-5 for the capture (the zoo's
bound, tests/integration/zoo/test_zoo.py).

Each tolerance is a few times the worst measured: about one eps of the dtype for a weight (bfloat16 2**-7 =
7.8e-3, float16 2**-10 = 9.8e-4), 1.3 eps for an entropy. On an accelerator nothing is measured here (no GPU in
this project's CI); its rows are stated, the same bounds in low precision (cuBLAS and MPS kernels round
differently per batch shape, so nothing is exact there) and 1e-4 in float32, for benchmarks/gpu.py to check.
Parity's own bound, which the Parity page and ``attnviz heads --parity`` apply, is
:data:`attnviz.models.record.PARITY_TOLERANCES` (one eps in low precision, 1e-5 in float32).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnviz.models.record import PARITY_TOLERANCES


def _low_precision(eps: float) -> dict[str, float]:
    return {"weights": eps, "max_weight": eps, "pooled": eps, "entropy": 1.3 * eps}


TOLERANCE: dict[tuple[str, str], dict[str, float]] = {
    ("cpu", "float32"): {"weights": 1e-5, "max_weight": 1e-5, "pooled": 1e-5, "entropy": 1e-5, "parity": 0.0, "kv": 0.0},
    ("cpu", "bfloat16"): {**_low_precision(2**-7), "parity": 2**-9, "kv": 0.0},
    ("cpu", "float16"): {**_low_precision(2**-10), "parity": 2**-13, "kv": 0.0},
}  # fmt: skip
for _kind in ("cuda", "mps"):
    TOLERANCE[(_kind, "float32")] = {**_low_precision(1e-4), "parity": PARITY_TOLERANCES["float32"], "kv": 1e-5}
    for _dtype, _eps in (("bfloat16", 2**-7), ("float16", 2**-10)):
        TOLERANCE[(_kind, _dtype)] = {**_low_precision(_eps), "parity": PARITY_TOLERANCES[_dtype], "kv": _eps}


def tolerance(device: str, dtype: str, quantity: str) -> float:
    """The bound for ``quantity`` on ``device`` ("cpu", "cuda:1", "mps") in ``dtype`` ("bfloat16")."""
    return TOLERANCE[(device.split(":")[0], dtype)][quantity]


MEASURED: dict[tuple[str, str], dict[str, float]] = {}  # filled by the bfloat16 suite as it runs: (family, dtype)

# "unchanged": a pass compared with itself run another way (a no-op ablation: the baseline beside ablated rows in
# one batch; a KL in nats, a 1 - cos): exact on the CPU, the same kernel on every row; on an accelerator a batch of
# another shape may round differently (cuBLAS picks its algorithm per shape), so a few rounding steps of the logits,
# whose KL is of their square: stated, not measured.
for (_kind, _dtype), _row in TOLERANCE.items():
    _row["unchanged"] = 0.0 if _kind == "cpu" else {"float32": 1e-5, "bfloat16": 2**-7, "float16": 2**-10}[_dtype]


def assert_exact_on_cpu(actual, expected, device, dtype: str = "float32", quantity: str = "parity") -> None:
    """``actual`` equals ``expected`` where the bound for ``quantity`` is 0 (the same arithmetic on the same CPU
    kernel: exact, not close) and lies within :func:`tolerance` of it on any other device (cuda, mps).

    Floats, or tensors compared element by element; ``device``: where the compared work ran (a source's
    ``device``, a str or a torch.device)."""
    bound = tolerance(str(device), dtype, quantity)
    actual, expected = torch.as_tensor(actual, dtype=torch.float64), torch.as_tensor(expected, dtype=torch.float64)
    if bound == 0.0:
        assert torch.equal(actual, expected.expand_as(actual)), (
            f"{quantity} not exact on {device}: {actual} != {expected}"
        )
    else:
        worst = float((actual - expected).abs().max()) if actual.numel() else 0.0
        assert worst <= bound, f"{quantity} on {device} ({dtype}) differs by {worst:.3g} > {bound:.3g}"


# ----------------------------------------------------------------------------------------------------------------------
# Bounds derived, not tuned (STYLE §22). Two computations that are not the same arithmetic (another batch shape, another
# kernel, another device or dtype) differ by rounding alone: each product and sum rounds by at most eps(dtype) relative,
# and roundings that are independent add like a random walk, so a result of size |value| reached through a reduction
# of depth n (the number of roundings that feed it) is off by about eps × |value| × √n. The safety factor covers what
# the random-walk estimate leaves out (a kernel that blocks its sums differently rounds a few terms more than once).

EPS = {"float32": torch.finfo(torch.float32).eps, "bfloat16": torch.finfo(torch.bfloat16).eps}
EPS["float16"], EPS["float64"] = torch.finfo(torch.float16).eps, torch.finfo(torch.float64).eps


def derived_bound(dtype: str, magnitude: float, depth: int, safety: float = 4.0) -> float:
    """eps(dtype) × magnitude × √depth × safety: how far two roundings of one computation may lie apart."""
    return EPS[dtype] * max(abs(magnitude), 1.0) * math.sqrt(max(depth, 1)) * safety


def forward_depth(n_layer: int, d_model: int, d_ff: int | None = None) -> int:
    """The roundings that feed one output of a transformer's forward: each layer adds to the residual a sum over
    d_model (attention's o_proj) and over d_ff (the MLP's down projection, 4 × d_model where unknown), and the
    unembedding sums d_model more."""
    return n_layer * (d_model + (d_ff or 4 * d_model)) + d_model


@dataclass(frozen=True)
class Bound:
    """A named comparison's bound, and the sentence that derives it."""

    value: float
    why: str


# The fixed bounds the suites name, each derived from the sizes it covers, with its sentence. float32 eps = 1.19e-7.
_SCORE = derived_bound("float32", 8.0, 128)  # a score: head_dim ≤ 128 products, |q·k| ≤ 8 in every suite's models
BOUNDS: dict[str, Bound] = {
    "attention": Bound(
        _SCORE / 4,
        f"an attention weight or output in float32 from two routes (ours against torch's sdpa, eager's, a fused or a"
        f" chunked pass): a score sums head_dim ≤ 128 products of size ≤ 8, off by {_SCORE:.2g} (safety 4); a weight w"
        f" moves by w(1 − w) ≤ 1/4 of that, {_SCORE / 4:.2g}; an output is a weighted mean of values, no larger",
    ),
    "row_statistics": Bound(
        _SCORE / 4,
        "entropy, max weight and the per-row shares from two routes: a max moves as its weight does (attention's"
        " bound); a share or an entropy sums a row's weight errors, which add to the row's sum of 1 and so cancel",
    ),
    "logits": Bound(
        derived_bound("float32", 12.0, forward_depth(2, 32)),
        "next-token logits of a tiny model (2 layers, hidden 32, |logit| ≤ 12) from one pass against a fresh load's:"
        " the forward's depth at the largest logit, derived_bound('float32', 12, forward_depth(2, 32))",
    ),
    "record_weights": Bound(
        derived_bound("float32", 1.0, 24),
        "a weight of a hand-made record (tests/unit/labs/role_patterns.py: scores log w, rows of T ≤ 24 keys) against"
        " its exact w: the float32 softmax's sum over T keys rounds the weight (≤ 1) by eps relative per term, and the"
        " log's rounding moves w by eps·w·|log w| ≤ eps/e: derived_bound('float32', 1, 24)",
    ),
    "record_statistics": Bound(
        derived_bound("float32", math.log(24), 24),
        "a statistic of a hand-made record's rows (an entropy, a score, a share, a JSD) against its value by hand:"
        " it sums a row's T ≤ 24 weight errors (record_weights) times the statistic's slope, |log w| ≤ ln 24 for"
        " the weights that carry it: derived_bound('float32', ln 24, 24)",
    ),
    "flow": Bound(
        derived_bound("float32", 1.0, 3 * 20) + 3 * 20 * 0.5e-9,
        "an attention flow (≤ 1; attnviz.labs.rollout, integer max-flow on capacities rounded to 1e-9) against a"
        " float max-flow (networkx's, or by hand): a cut holds ≤ n_layer·T = 3·20 edges whose capacities are float32"
        " weights (eps/2 each, derived_bound('float32', 1, 60)), each rounded to the integer unit once more (half of"
        " 1e-9 each, added in full), and the flow is returned in float32",
    ),
}


def bound(name: str) -> float:
    """The value of :data:`BOUNDS`' ``name``."""
    return BOUNDS[name].value

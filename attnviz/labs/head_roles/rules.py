"""Each head's role and the rules that decide it: sink, previous-token, self, local, uniform, dead or content.

All roles but "dead" come from the record's row-averaged attention statistics (:func:`head_roles`). "Dead" is
about a head's *output*: attention alone cannot tell a no-op head from a sink head that reads a useful first
token, so it needs each head's weighted sum of V through its slice of W_O, which :func:`head_output_norms` gets
by rerunning every layer with our own module (:meth:`AttentionSource.attention_layer`) on a short prefix of the
text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from attnviz.core.attention import scaled_dot_product_attention
from attnviz.core.capture import WINDOW_CELLS
from attnviz.core.head_stats import PREVIOUS_TOKEN, SINK_FIRST_TOKEN, UNIFORM_ENTROPY_NORM
from attnviz.core.progress import Progress, or_none
from attnviz.i18n.message import Message, msg
from attnviz.models.record import AttentionRecord
from attnviz.models.source import AttentionSource, LayerInput

ROLES = ("sink", "previous-token", "self", "local", "uniform", "dead", "content", "undetermined")
SELF_TOKEN = 0.5  # a self head puts at least this much weight on its own position
LOCAL_WINDOW = 3  # a local head's keys lie within this many positions of the query, either side
LOCAL_WEIGHT = 0.5  # ... and carry at least this much of its weight
ROW_CHUNK = 256  # query rows per weights_window call when measuring local weight

# "dead": a head whose output (its weighted sum of V through its slice of W_O) has a mean norm under this share of
# the median head of its layer. Measured on at most OUTPUT_TOKENS tokens, every layer's input from one pass of the
# model, each layer rerun once by our own module
DEAD_OUTPUT_SHARE = 0.1
OUTPUT_TOKENS = 128
# what finding dead heads costs: one pass plus one rerun of every layer, about 12·d_model² multiply-adds a token a
# layer each. SmolLM2 (30 layers, d_model 576) at 128 tokens: 1.5e10, measured at 0.45 s by benchmarks/head_roles.py
# on a 2-core CPU. Under OUTPUT_AUTO_MACS (every bundled model; the embedded model up to 12 layers of d_model 1,024)
# the page measures outputs on every run, and the dead role counts across prompts too; over it the user asks for
# it, told how long it takes
OUTPUT_AUTO_MACS = 2 * 10**11
OUTPUT_SECONDS_PER_MAC = 0.45 / (2 * 30 * 128 * 12 * 576**2)


def describe_roles() -> Message:
    """The role rules in words, with the thresholds this module applies."""
    return msg(
        "head_roles_lib.describe",
        sink=SINK_FIRST_TOKEN,
        previous=PREVIOUS_TOKEN,
        self_token=SELF_TOKEN,
        uniform=UNIFORM_ENTROPY_NORM,
        local=LOCAL_WEIGHT,
        window=LOCAL_WINDOW,
        dead=DEAD_OUTPUT_SHARE,
        tokens=OUTPUT_TOKENS,
    )


def role_name(role: str) -> Message:
    """A role's name, to show (the data keeps the English one: "previous-token" …)."""
    return msg(f"head_roles_lib.role_{role.replace('-', '_')}")


def entropy_without_first(row_entropy: Tensor, first_weight: Tensor) -> Tensor:
    """Entropy (nats) of each row once the first key is removed and the rest renormalised: (...) -> (...).

    From the row's entropy H and first-key weight w0 alone, since
    H' = (H + w0·log w0) / (1 - w0) + log(1 - w0). NaN where the rest weighs under 1e-6.
    """
    rest = 1.0 - first_weight
    safe = rest.clamp_min(1e-6)
    value = (row_entropy + torch.special.xlogy(first_weight, first_weight)) / safe + safe.log()
    return torch.where(rest > 1e-6, value.clamp_min(0.0), torch.nan)


def local_weight(record: AttentionRecord, window: int = LOCAL_WINDOW) -> Tensor:
    """Each row's weight on keys within ``window`` positions of the query: (n_layer, n_head, q_len).

    Recomputed from the kept q and k in chunks of rows, each reading only the
    band around its diagonal. NaN everywhere when the record kept no q and k.
    """
    out = torch.full((record.n_layer, record.n_head, record.q_len), math.nan)
    if record.layers[0].q is None:
        return out
    offset = record.k_len - record.q_len  # query i sits at position offset + i
    chunk = max(1, min(ROW_CHUNK, WINDOW_CELLS // (ROW_CHUNK + 2 * window + 1)))
    for r0 in range(0, record.q_len, chunk):
        r1 = min(record.q_len, r0 + chunk)
        c0, c1 = max(0, r0 + offset - window), min(record.k_len, r1 + offset + window)
        q_pos = torch.arange(r0, r1) + offset  # (C,)
        k_pos = torch.arange(c0, c1)  # (W,)
        near = ((q_pos[:, None] - k_pos[None, :]).abs() <= window).float()  # (C, W)
        for layer in range(record.n_layer):
            weights = record.weights(layer, None, (r0, r1), (c0, c1))  # (n_head, C, W)
            out[layer, :, r0:r1] = (weights * near).sum(dim=-1)
    return out


def _row_means(record: AttentionRecord) -> dict[str, Tensor]:
    """The role statistics of every head, averaged over live rows: {name: (n_layer, n_head)}."""
    live = record.live_rows()[:, None, :]  # (n_layer, 1, q_len)
    first = record.row_stat("first_token_weight")
    rows = {
        "first_token_weight": first,
        "prev_token_weight": record.row_stat("prev_token_weight"),
        "self_weight": record.row_stat("self_weight"),
        "local_weight": local_weight(record),
        "entropy_without_sink": entropy_without_first(record.row_stat("entropy"), first.nan_to_num(0.0)),
    }
    means = {name: torch.nanmean(value.masked_fill(~live, math.nan), dim=-1) for name, value in rows.items()}
    stats = record.statistics
    means["entropy_norm"] = torch.tensor(stats["entropy_norm"].to_numpy()).view(record.n_layer, record.n_head)
    means["max_weight"] = torch.tensor(stats["max_weight"].to_numpy()).view(record.n_layer, record.n_head)
    return means


def assign_role(stats: dict[str, float]) -> tuple[str, float]:
    """One head's role and the score that decided it, from its averaged statistics (see :func:`describe_roles`)."""

    def value(name: str) -> float:
        v = stats.get(name)
        return math.nan if v is None else float(v)

    if not math.isnan(value("output_share")) and value("output_share") < DEAD_OUTPUT_SHARE:
        return "dead", value("output_share")
    if math.isnan(value("entropy_norm")):
        return "undetermined", math.nan
    single = [
        ("sink", value("first_token_weight"), SINK_FIRST_TOKEN),
        ("previous-token", value("prev_token_weight"), PREVIOUS_TOKEN),
        ("self", value("self_weight"), SELF_TOKEN),
    ]
    passed = [(score, role) for role, score, line in single if not math.isnan(score) and score >= line]
    if passed:
        score, role = max(passed)
        return role, score
    if value("entropy_norm") >= UNIFORM_ENTROPY_NORM:
        return "uniform", value("entropy_norm")
    if not math.isnan(value("local_weight")) and value("local_weight") >= LOCAL_WEIGHT:
        return "local", value("local_weight")
    return "content", value("max_weight")  # how sharply it picks keys by what they are, not where


def per_head_output(out: Tensor, w_o: Tensor) -> Tensor:
    """Each head's part of the layer output: out (B, n_head, T, head_dim), W_O's weight (d_model, n_head · head_dim)
    -> (B, n_head, T, d_model).

    Head h's columns of W_O are h · head_dim to (h + 1) · head_dim, as :func:`~attnviz.core.attention.merge_heads` lays
    the heads side by side, so the sum over heads (plus W_O's bias, which no head owns) is the layer's output.
    """
    n_head, head_dim = out.shape[1], out.shape[-1]
    w = w_o.view(w_o.shape[0], n_head, head_dim)  # (d_model, n_head, head_dim)
    return torch.einsum("bhtd,mhd->bhtm", out, w)  # (B, n_head, T, d_model)


@torch.no_grad()
def layer_output_norms(layer: LayerInput) -> Tensor:
    """Each head's output norm after W_O, averaged over the query rows that see a key: (n_head,).

    Reruns ``layer`` as :meth:`MultiHeadAttention.forward` does (project, RoPE, attention under the layer's mask
    and scale), but keeps the heads apart before W_O mixes them.
    """
    mha, x = layer.attention, layer.hidden  # x: (1, T, d_model)
    positions = torch.arange(x.shape[1], device=x.device)
    q, k, v = mha.project_qkv(x, x, x, layer.rotate, positions)  # (1, n_head, T, hd), (1, n_kv_head, T, hd) x 2
    out, _ = scaled_dot_product_attention(q, k, v, layer.mask, layer.scale)  # (1, n_head, T, head_dim)
    norms = per_head_output(out, mha.w_o.weight).norm(dim=-1)[0].float().cpu()  # (n_head, T)
    live = torch.ones(x.shape[1], dtype=torch.bool) if layer.mask is None else layer.mask.bool().any(-1).cpu()
    return norms[:, live].mean(dim=-1)  # (n_head,)


@dataclass(frozen=True)
class HeadOutputs:
    """How much each head adds to its layer's output.

    norm: (n_layer, n_head) mean over query rows of ‖Σ_j w_ij v_j · W_O[:, head]ᵀ‖, on the first ``n_tokens``
    tokens of the text (``n_input`` before the cut).
    """

    norm: np.ndarray
    n_tokens: int
    n_input: int

    @property
    def nbytes(self) -> int:
        return self.norm.nbytes

    @property
    def share(self) -> np.ndarray:
        """Each head's norm over the median head of its layer: (n_layer, n_head); NaN where the median is 0."""
        median = np.median(self.norm, axis=1, keepdims=True)  # (n_layer, 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(median > 0, self.norm / median, np.nan)

    @property
    def dead(self) -> np.ndarray:
        """(n_layer, n_head) bool: the output averages under DEAD_OUTPUT_SHARE of the layer's median head."""
        share = self.share
        return ~np.isnan(share) & (share < DEAD_OUTPUT_SHARE)


def head_output_norms(
    source: AttentionSource, text: str, max_tokens: int, progress: Progress | None = None
) -> HeadOutputs:
    """Every head's output norm on the first min(max_tokens, OUTPUT_TOKENS) tokens of ``text``.

    Every layer's input from one pass (:meth:`~attnviz.models.source.AttentionSource.attention_layers`). Raises what
    that raises: ParityUnsupportedError when our module cannot rerun this source's layers (then there is no dead
    role). ``progress``: the pass (weighed as n_layer layers), then a step a layer.
    """
    progress = or_none(progress)
    progress.plan([("progress.run", 1, [source.n_layer]), ("progress.layer", source.n_layer)])
    layers = source.attention_layers(text, min(max_tokens, OUTPUT_TOKENS))
    progress.step()
    if layers[0].hidden.shape[1] == 0:
        raise ValueError(msg("head_roles_lib.no_tokens_outputs"))
    progress.stage("progress.layer", len(layers))
    norms = []
    for layer in layers:
        norms.append(layer_output_norms(layer))
        progress.step()
    norms = torch.stack(norms)  # (n_layer, n_head)
    return HeadOutputs(norms.numpy(), len(layers[0].tokens), layers[0].n_input)


def output_cost_macs(source: AttentionSource, max_tokens: int) -> int:
    """About how many multiply-adds :func:`head_output_norms` costs (see OUTPUT_AUTO_MACS)."""
    return 2 * source.n_layer * min(max_tokens, OUTPUT_TOKENS) * 12 * source.d_model**2


def outputs_by_themselves(source: AttentionSource, max_tokens: int) -> bool:
    """Whether finding dead heads is cheap enough to run on every run (OUTPUT_AUTO_MACS), not only when asked."""
    return output_cost_macs(source, max_tokens) <= OUTPUT_AUTO_MACS


def output_seconds(source: AttentionSource, max_tokens: int) -> float:
    """About how long :func:`head_output_norms` takes on a 2-core CPU (calibrated on SmolLM2, see above)."""
    return output_cost_macs(source, max_tokens) * OUTPUT_SECONDS_PER_MAC


def head_roles(record: AttentionRecord, outputs: HeadOutputs | None = None) -> pd.DataFrame:
    """One row per head: layer, head, role, score, entropy_without_sink and the statistics behind the role.

    score is the statistic that decided the role (the first-token weight of a
    sink, the entropy_norm of a uniform head, the max weight of a content head,
    the output share of a dead head). entropy_without_sink is the row entropy in
    nats after the first token is removed and the rest renormalised, averaged
    over rows: how much choice is left once the sink is set aside.
    ``outputs`` (from :func:`head_output_norms`) adds output_norm and
    output_share (the norm over its layer's median head) and the dead role;
    without it they are NaN and no head is dead. attention_role is the role the
    pattern alone gives (what a dead head would be, were it not dead).
    """
    means = _row_means(record)
    columns = (
        "entropy_without_sink",
        "first_token_weight",
        "prev_token_weight",
        "self_weight",
        "local_weight",
        "entropy_norm",
        "max_weight",
    )
    if outputs is not None and outputs.norm.shape != (record.n_layer, record.n_head):
        raise ValueError(f"outputs are {outputs.norm.shape}, the record has ({record.n_layer}, {record.n_head}) heads")
    norm = np.full((record.n_layer, record.n_head), np.nan) if outputs is None else outputs.norm
    share = np.full((record.n_layer, record.n_head), np.nan) if outputs is None else outputs.share
    rows = []
    for layer in range(record.n_layer):
        for head in range(record.n_head):
            stats = {name: float(means[name][layer, head]) for name in columns}
            pattern_role, _ = assign_role(stats)
            extra = {"output_norm": float(norm[layer, head]), "output_share": float(share[layer, head])}
            role, score = assign_role({**stats, **extra})
            rows.append(
                {
                    "layer": layer,
                    "head": head,
                    "role": role,
                    "score": score,
                    **stats,
                    **extra,
                    "attention_role": pattern_role,
                }
            )
    return pd.DataFrame(
        rows, columns=["layer", "head", "role", "score", *columns, "output_norm", "output_share", "attention_role"]
    )

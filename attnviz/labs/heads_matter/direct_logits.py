"""Direct logit attribution: what each head's output adds, through W_O and the unembedding, to one token's logit.

The residual stream entering the final norm is a sum: the embeddings, every head's output z_h W_O^h, the output
projections' biases, every MLP's output. The final norm is not linear, but with its scale frozen at the value the
whole stream gave it, it is: an RMSNorm maps a part c to (c / σ_t) ⊙ w, a LayerNorm to ((c − mean(c)) / σ_t) ⊙ w
(σ_t the position's own, from the whole stream; w the norm's gain, or 1 + w as Gemma stores it), so the logit of
token y at position t is Σ_parts (norm_t(c) · U_y) + b · U_y + bias_y, and each head's part is exact in that
frozen-scale reading (TransformerLens' ``apply_ln_to_stack`` with the cached scale). What the heads do not carry
(embeddings, MLPs, biases) is the rest. The sum is checked: the frozen-scale map of the whole stream must give the
model's own logit; a model whose logits are changed after its LM head by more than a scale (a soft cap) fails the
check, and the page says so with both numbers. Two scales applied without a module are found in the pass by data
flow and applied (:mod:`attnviz.models.hf.read_outs`): a layer's attention output joining the stream times c
(Granite's ``residual_multiplier``: each of the layer's heads contributes c · z_h W_O^h), and logits that are the
LM head's output times s (Granite's 1 / ``logits_scaling``). Each of them carries its verdict
(:class:`~attnviz.models.readings.Reading`): a parallel block's join is not applicable (its attention output joins
the stream beside the MLP's, unscaled), and a scale the pass could not tell refuses the attribution in one line,
never counted as 1.0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.core.admission import Need
from attnviz.core.attention import reduction_dtype
from attnviz.core.budget import ACTIVATION_WIDTHS
from attnviz.i18n.message import msg
from attnviz.labs.heads_matter.agreement import by_size
from attnviz.labs.heads_matter.common import Head, lab_need, rounded
from attnviz.models.readings import NOT_APPLICABLE, Reading, Verdict
from attnviz.models.source import AttentionSource, Capability, EditsHeads

CHECK_TOLERANCE = 1e-3  # the reconstructed logit against the model's: this much of max(1, |logit|) (float32)
NORM_TOLERANCE = 1e-3  # the frozen-scale reading of the final norm against its output: this much of its scale
LOW_PRECISION_TOLERANCE = 3e-2  # both, for a model run in bfloat16 or float16 (8 bits of mantissa: 4e-3 a rounding)


def tolerance(dtype: torch.dtype, float32: float) -> float:
    """A check's tolerance for a model run in ``dtype``: ``float32``'s, or the low-precision one."""
    return float32 if dtype in (torch.float32, torch.float64) else max(float32, LOW_PRECISION_TOLERANCE)


@dataclass(frozen=True)
class DirectLogits:
    """Every head's direct contribution to ``token``'s logit at every position.

    per_head: (T, n_layer, n_head) float64; rest: (T,), what the heads do not carry; logits: (T,), the model's
    own logit of the token; reconstructed: (T,), the frozen-scale reading of the whole stream (the check);
    norm: "rms" or "layer"; gain: "w" or "1 + w".
    """

    model: str
    tokens: list[str]
    token: str
    token_id: int
    per_head: Tensor
    rest: Tensor
    logits: Tensor
    reconstructed: Tensor
    norm: str
    gain: str
    dtype: torch.dtype = torch.float32
    joins: tuple[Reading, ...] = ()  # per layer: the attention output joins the stream times this
    head_scale: Reading = NOT_APPLICABLE  # the LM head reads the final norm's output times this
    output_scale: Reading = NOT_APPLICABLE  # the model's logits are its LM head's output times this

    @property
    def join_scales(self) -> tuple[float, ...]:
        """Each layer's join scale as applied (1.0 where not applicable)."""
        return tuple(float(r.value) for r in self.joins)

    @property
    def logit_scale(self) -> float:
        """Everything between the final norm's output and the logits, as applied: head scale × output scale."""
        return float(self.head_scale.value) * float(self.output_scale.value)

    def scales(self) -> dict:
        """Each read-out with its verdict, as JSON: ``join`` (one a layer), ``head_input``, ``logits`` and the
        ``final_norm`` (its frozen-scale reading: found, or the attribution is refused)."""
        return {
            "join": [r.to_json() for r in self.joins],
            "head_input": self.head_scale.to_json(),
            "logits": self.output_scale.to_json(),
            "final_norm": {"value": NORM_NAMES[self.norm], "gain": self.gain, "verdict": Verdict.FOUND.value},
        }

    @property
    def scaled(self) -> bool:
        """Whether the model scales its attention outputs or its logits without a module (found and applied)."""
        return self.logit_scale != 1.0 or any(c != 1.0 for c in self.join_scales)

    @property
    def check_error(self) -> float:
        """The largest |reconstructed − logit| over the positions."""
        return float((self.reconstructed - self.logits).abs().max())

    @property
    def checked(self) -> bool:
        return self.check_error <= tolerance(self.dtype, CHECK_TOLERANCE) * max(1.0, float(self.logits.abs().max()))

    def at(self, position: int) -> Tensor:
        """The layer × head map at ``position``: (n_layer, n_head)."""
        return self.per_head[position]

    def ranked(self, position: int, k: int | None = None) -> list[tuple[int, int, float]]:
        return by_size(self.at(position).tolist(), k)

    def head_positions(self, head: Head) -> Tensor:
        """One head's contribution at every position: (T,)."""
        return self.per_head[:, head[0], head[1]]

    def to_json(self, position: int) -> dict:
        return {
            "model": self.model,
            "token": self.token,
            "position": position,
            "logit": rounded(float(self.logits[position])),
            "heads_total": rounded(float(self.per_head[position].sum())),
            "rest": rounded(float(self.rest[position])),
            "check_error": rounded(self.check_error),
            "per_head": [[rounded(float(v)) for v in row] for row in self.per_head[position]],
        }


NORM_NAMES = {"rms": "RMSNorm", "layer": "LayerNorm"}
EPSILONS = (1e-5, 1e-6, 1e-8, 1e-12)  # tried, in order, for a norm that does not store its epsilon


def norm_reading(
    residual: Tensor, normed: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float | None, limit: float
):
    """Which frozen-scale reading reproduces the final norm best: (centre, gain name, gain (d,), σ (T, 1)), or None
    where none does within ``limit``. ``eps`` None: the norm does not store it, and the usual ones are tried.

    The best, not the first within the limit: in bfloat16 a LayerNorm of a stream whose mean is small is reproduced
    within the rounding by an RMS reading too, and that reading would give every head a wrong part (its mean is not
    removed) while the whole stream's check still passed."""
    x = residual.double()
    b = bias.double() if bias is not None else torch.zeros(x.shape[-1], dtype=torch.float64)
    scale = float(normed.abs().max()) if normed.numel() else 1.0
    best, best_error = None, limit * max(1.0, scale)
    for epsilon in (eps,) if eps is not None else EPSILONS:
        for centre in (False, True):
            shifted = x - x.mean(dim=-1, keepdim=True) if centre else x
            sigma = (shifted.pow(2).mean(dim=-1, keepdim=True) + epsilon).sqrt()  # (T, 1)
            gains = [("w", weight.double()), ("1 + w", 1.0 + weight.double())] if weight is not None else []
            gains.append(("1", torch.ones(x.shape[-1], dtype=torch.float64)))
            for name, gain in gains:
                error = float((shifted / sigma * gain + b - normed.double()).abs().max())
                if error <= best_error if best is None else error < best_error:  # ties: the earlier reading
                    best, best_error = (centre, name, gain, sigma), error
    return best


def determined_joins(read, n_layer: int) -> tuple[Reading, ...]:
    """Each layer's join reading (those the pass never reached not determined), or ValueError naming the first
    scale the pass could not tell: a join, the LM head's input or the logits."""
    joins = tuple(read.join_scales[:n_layer]) + (Reading.not_determined(),) * (n_layer - len(read.join_scales))
    for layer, join in enumerate(joins):
        if not join.determined:
            raise ValueError(msg("direct_logits_lib.join_undetermined", layer=layer))
    if not read.head_scale.determined:
        raise ValueError(msg("direct_logits_lib.head_undetermined"))
    if not read.logit_scale.determined:
        raise ValueError(msg("direct_logits_lib.logits_undetermined"))
    return joins


def head_parts(
    zs: Sequence[Tensor], blocks: Iterable[tuple[Tensor, Tensor | None]], direction: Tensor, joins: Sequence[Reading]
) -> Tensor:
    """Each head's part of the logit, z_h W_O^h · direction_t times its layer's join: zs[layer] (T, n_head, head_dim)
    as the pass gave it and each layer's W_O^h (n_head, head_dim, d_model) (:meth:`head_blocks`, one layer at a
    time), both on the layer's device; direction (T, d_model) float64 on the host -> (T, n_layer, n_head) float64 on
    the host. Each layer is reduced where it lives, in :func:`~attnviz.core.attention.reduction_dtype` of its device
    (float64 on the CPU: bit for bit what the host did), and only its (T, n_head) parts cross, once a layer."""
    per_head = []
    for layer, (w_o, _) in enumerate(blocks):
        dtype = reduction_dtype(w_o.device)
        toward = direction.to(w_o.device, dtype)  # (T, d_model)
        back = torch.einsum("hkd,td->thk", w_o.to(dtype), toward)  # (T, n_head, head_dim): W_O^h direction_t
        part = (zs[layer].to(w_o.device, dtype) * back).sum(dim=-1)  # (T, n_head)
        per_head.append(part.to("cpu", torch.float64) * float(joins[layer].value))
    return torch.stack(per_head, dim=1)  # (T, n_layer, n_head)


def direct_logits_need(source: AttentionSource, n_tokens: int) -> Need:
    """:func:`direct_logit_attribution`'s price on ``source``'s device: one pass of ``n_tokens`` tokens (a layer's
    activations, every head's z kept, the logits, the stream before and after the final norm, in float32) and, on the
    host, every head's part and the direction in float64 (:func:`attnviz.labs.heads_matter.common.lab_need`)."""
    T, d_model, heads = max(1, n_tokens), source.d_model, source.n_layer * source.n_head
    vocab = getattr(getattr(source, "config", None), "vocab_size", 0) or 0
    on_pass = 4 * T * (ACTIVATION_WIDTHS * d_model + heads * source.head_dim + vocab + 2 * d_model)
    return lab_need(source, on_pass + 8 * T * (2 * heads + 2 * d_model), n_tokens, 1.0)


def direct_logit_attribution(
    source: AttentionSource, text: str, max_tokens: int, token: str | None = None, position: int | None = None
) -> DirectLogits:
    """Each head's direct contribution to ``token``'s logit (default: the model's top next token at ``position``,
    default the last; negative: from the end) at every position of ``text``. ValueError when the source cannot edit
    heads, has no LM head, its final norm is not one a frozen scale reads (RMSNorm or LayerNorm), a scale between a
    head and the logit could not be told, the position is not in the text or the token is not one token."""
    if Capability.EDIT_HEADS not in source.capabilities or not isinstance(source, EditsHeads):
        raise ValueError(msg("patching_lib.unsupported", name=source.name))
    if Capability.GENERATE not in source.capabilities:
        raise ValueError(msg("direct_logits_lib.no_lm", name=source.name))
    encoding = source.encode(text, max_tokens)
    if not encoding.tokens:
        raise ValueError(msg("patching_lib.no_tokens"))
    zs: dict[int, Tensor] = {}

    def record(layer: int, z: Tensor) -> Tensor:
        zs[layer] = z[0].detach().clone()  # (T, n_head, head_dim): on the layer's device, in the model's dtype
        return z

    _, read = source.head_pass(encoding, 1, record, read=True)
    if isinstance(read, str) or read is None:
        raise ValueError(msg("direct_logits_lib.no_readout", name=source.name, why=read or "it has no LM head"))
    if read.transformed is not None:
        raise ValueError(msg("direct_logits_lib.transformed", name=source.name, module=read.transformed))
    T = len(encoding.tokens)
    at = T - 1 if position is None else position + T if position < 0 else position
    if not 0 <= at < T:
        raise ValueError(msg("direct_logits_lib.position", position=position, last=T - 1, first=-T))
    if token is None:
        token_id = int(read.logits[at].argmax().cpu())  # the top token's id: one value crosses
    else:
        ids = source.token_ids(token)
        if len(ids) != 1:
            pieces = " + ".join(repr(t) for t in source.token_texts(ids)) or "nothing"
            raise ValueError(msg("patching_lib.not_one_token", token=token, n=len(ids), pieces=pieces))
        token_id = ids[0]
    weight, bias, eps = read.norm_weight, read.norm_bias, read.norm_eps
    reading = norm_reading(read.residual, read.normed, weight, bias, eps, tolerance(read.dtype, NORM_TOLERANCE))
    if reading is None:
        raise ValueError(msg("direct_logits_lib.norm", name=source.name, norm=read.norm))
    centre, gain_name, gain, sigma = reading
    joins = determined_joins(read, len(zs))
    logit_scale = float(read.head_scale.value) * float(read.logit_scale.value)
    row, row_bias = read.unembedding_rows([token_id])  # (1, d_model), (1,) or None: the one row it reads
    u = row[0].to("cpu", torch.float64) * logit_scale  # (d_model,)
    direction = gain[None, :] * u[None, :] / sigma  # (T, d_model): a part c adds c · direction (after centring)
    if centre:
        direction = direction - direction.mean(dim=-1, keepdim=True)  # (c − mean c) · v = c · (v − mean v)
    constant = float((bias.double() @ u) if bias is not None else 0.0)
    if row_bias is not None:
        constant += float(row_bias[0].float().cpu()) * float(read.logit_scale.value)
    per_head = head_parts([zs[layer] for layer in range(len(zs))], source.head_blocks(), direction, joins)
    reconstructed = (read.residual.double() * direction).sum(dim=-1) + constant  # (T,)
    logits = read.logits[:, token_id].to("cpu", torch.float64)  # (T,): the token's logits, all that crosses
    return DirectLogits(
        model=source.name,
        tokens=[t.text for t in encoding.tokens],
        token=source.token_texts([token_id])[0],
        token_id=token_id,
        per_head=per_head,
        rest=reconstructed - per_head.sum(dim=(1, 2)),
        logits=logits,
        reconstructed=reconstructed,
        norm="layer" if centre else "rms",
        gain=gain_name,
        dtype=read.dtype,
        joins=joins,
        head_scale=read.head_scale,
        output_scale=read.logit_scale,
    )

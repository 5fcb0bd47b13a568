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
flow and applied (:mod:`attnviz.models.hf.head_edits`): a layer's attention output joining the stream times c
(Granite's ``residual_multiplier``: each of the layer's heads contributes c · z_h W_O^h), and logits that are the
LM head's output times s (Granite's 1 / ``logits_scaling``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.i18n.message import msg
from attnviz.labs.ablation import Head, _rounded
from attnviz.labs.agreement import by_size
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
    join_scales: tuple[float, ...] = ()  # per layer: the attention output joins the stream times this (found)
    logit_scale: float = 1.0  # the model's logits are its LM head's output times this (found)

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
            "logit": _rounded(float(self.logits[position])),
            "heads_total": _rounded(float(self.per_head[position].sum())),
            "rest": _rounded(float(self.rest[position])),
            "check_error": _rounded(self.check_error),
            "per_head": [[_rounded(float(v)) for v in row] for row in self.per_head[position]],
        }


EPSILONS = (1e-5, 1e-6, 1e-8, 1e-12)  # tried, in order, for a norm that does not store its epsilon


def _norm_reading(
    residual: Tensor, normed: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float | None, limit: float
):
    """Which frozen-scale reading reproduces the final norm: (centre, gain name, gain (d,), σ (T, 1)), or None.
    ``eps`` None: the norm does not store it, and the usual ones are tried."""
    x = residual.double()
    b = bias.double() if bias is not None else torch.zeros(x.shape[-1], dtype=torch.float64)
    scale = float(normed.abs().max()) if normed.numel() else 1.0
    for epsilon in (eps,) if eps is not None else EPSILONS:
        for centre in (False, True):
            shifted = x - x.mean(dim=-1, keepdim=True) if centre else x
            sigma = (shifted.pow(2).mean(dim=-1, keepdim=True) + epsilon).sqrt()  # (T, 1)
            gains = [("w", weight.double()), ("1 + w", 1.0 + weight.double())] if weight is not None else []
            gains.append(("1", torch.ones(x.shape[-1], dtype=torch.float64)))
            for name, gain in gains:
                guess = shifted / sigma * gain + b
                if float((guess - normed.double()).abs().max()) <= limit * max(1.0, scale):
                    return centre, name, gain, sigma
    return None


def direct_logit_attribution(
    source: AttentionSource, text: str, max_tokens: int, token: str | None = None, position: int | None = None
) -> DirectLogits:
    """Each head's direct contribution to ``token``'s logit (default: the model's top next token at ``position``,
    default the last) at every position of ``text``. ValueError when the source cannot edit heads, has no LM head,
    its final norm is not one a frozen scale reads (RMSNorm or LayerNorm), or the token is not one token."""
    if Capability.EDIT_HEADS not in source.capabilities or not isinstance(source, EditsHeads):
        raise ValueError(msg("patching_lib.unsupported", name=source.name))
    if Capability.GENERATE not in source.capabilities:
        raise ValueError(msg("direct_logits_lib.no_lm", name=source.name))
    encoding = source.encode(text, max_tokens)
    if not encoding.tokens:
        raise ValueError(msg("patching_lib.no_tokens"))
    zs: dict[int, Tensor] = {}

    def record(layer: int, z: Tensor) -> Tensor:
        zs[layer] = z[0].detach().double().cpu()  # (T, n_head, head_dim)
        return z

    _, read = source.head_pass(encoding, 1, record, read=True)
    if isinstance(read, str) or read is None:
        raise ValueError(msg("direct_logits_lib.no_readout", name=source.name, why=read or "it has no LM head"))
    if read.transformed is not None:
        raise ValueError(msg("direct_logits_lib.transformed", name=source.name, module=read.transformed))
    T = len(encoding.tokens)
    at = T - 1 if position is None else position
    if not 0 <= at < T:
        raise ValueError(msg("direct_logits_lib.position", position=at, last=T - 1))
    if token is None:
        token_id = int(read.logits[at].argmax())
    else:
        ids = source.token_ids(token)
        if len(ids) != 1:
            pieces = " + ".join(repr(t) for t in source.token_texts(ids)) or "nothing"
            raise ValueError(msg("patching_lib.not_one_token", token=token, n=len(ids), pieces=pieces))
        token_id = ids[0]
    weight, bias, eps = read.norm_weight, read.norm_bias, read.norm_eps
    reading = _norm_reading(read.residual, read.normed, weight, bias, eps, tolerance(read.dtype, NORM_TOLERANCE))
    if reading is None:
        raise ValueError(msg("direct_logits_lib.norm", name=source.name, norm=read.norm))
    centre, gain_name, gain, sigma = reading
    u = read.unembedding[token_id].double() * read.logit_scale  # (d_model,)
    direction = gain[None, :] * u[None, :] / sigma  # (T, d_model): a part c adds c · direction (after centring)
    if centre:
        direction = direction - direction.mean(dim=-1, keepdim=True)  # (c − mean c) · v = c · (v − mean v)
    constant = float((bias.double() @ u) if bias is not None else 0.0)
    if read.unembedding_bias is not None:
        constant += float(read.unembedding_bias[token_id]) * read.logit_scale
    joins = [1.0 if c is None else c for c in read.join_scales]
    joins += [1.0] * (len(zs) - len(joins))
    per_head = []
    for layer, (blocks, _) in enumerate(source.head_blocks()):
        back = torch.einsum("hkd,td->thk", blocks.double(), direction)  # (T, n_head, head_dim): W_O^h direction_t
        per_head.append((zs[layer] * back).sum(dim=-1) * joins[layer])  # (T, n_head)
    per_head = torch.stack(per_head, dim=1)  # (T, n_layer, n_head)
    reconstructed = (read.residual.double() * direction).sum(dim=-1) + constant  # (T,)
    logits = read.logits[:, token_id].double()
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
        join_scales=tuple(joins[: len(zs)]),
        logit_scale=read.logit_scale,
    )

"""One attention layer of the current model, run step by step, each step beside the code that produced it.

The tutorial's nine steps of multi-head attention (project to Q, K and V, split
into heads, QKᵀ, scale, mask, softmax, weighted sum of V, merge the heads,
W_O), plus RoPE for Llama-style layers, on the hidden states that really
entered one layer (:class:`attnviz.models.source.LayerInput`). Each step calls what
:meth:`attnviz.core.attention.MultiHeadAttention.forward` calls, in the same order,
on the same tensors: the layer's own ``w_q``/``w_k``/``w_v``/``w_o``,
``split_heads``, the rotate hook, ``attention_scores``, ``fully_masked_rows``,
``apply_mask``, ``attention_weights``, ``weighted_values`` and ``merge_heads``.
So the last step equals the layer's forward (the tests hold it to 1e-6; it is
exact), and the source the page shows, taken with :func:`inspect.getsource`,
is the code that ran. The steps run in the layer's dtype, the model's own
(a bfloat16 model's walk is in bfloat16, its softmax accumulated in float32 as
the forward's is), so they stay exact there too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from attnviz.core.attention import (
    MultiHeadAttention,
    _softmax,
    apply_mask,
    attention_scores,
    attention_weights,
    fully_masked_rows,
    group_size,
    masked_softmax,
    merge_heads,
    reduction_dtype,
    softmax_dtype,
    split_heads,
    weighted_values,
)
from attnviz.core.masks import KeyRanges
from attnviz.core.progress import Progress, or_none
from attnviz.core.tokenizer import Token
from attnviz.i18n.message import Text, msg
from attnviz.labs.walkthrough.code import CALLED_WITHIN, DEFINITION, INNER_CALL, ShownCode, excerpt, whole
from attnviz.models.source import AttentionSource, LayerInput

# What a step's drawn tensor is, which decides how one head of it becomes a matrix.
FEATURES_BY_HEAD = "features by head"  # (batch, seq, n_head * head_dim)
FEATURES = "features"  # (batch, seq, d_model)
HEAD_FEATURES = "head features"  # (batch, n_head, seq, head_dim)
HEAD_SCORES = "head scores"  # (batch, n_head, q_len, k_len), any real number or -inf
HEAD_WEIGHTS = "head weights"  # (batch, n_head, q_len, k_len), in [0, 1]


@dataclass(frozen=True, eq=False)
class Step:
    """One step of the layer: what it produced, the code beside it and what changed.

    tensors: what the step produced, by the name the code gives it, on the CPU,
    batch axis kept; shown: the one the page draws (one head of it), whose axes
    ``axes`` names and whose layout ``kind`` gives; head_dim: the width of one
    head's slice of a ``FEATURES_BY_HEAD`` tensor.
    """

    key: str
    number: str
    title: Text
    tensors: dict[str, Tensor]
    shown: str
    kind: str
    axes: Text
    code: tuple[ShownCode, ...]
    change: Text
    head_dim: int = 0

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: tuple(t.shape) for name, t in self.tensors.items()}

    @property
    def nbytes(self) -> int:
        return sum(x.numel() * x.element_size() for x in self.tensors.values())


@dataclass(frozen=True, eq=False)
class Walkthrough:
    """Every step of one layer on one text, and how the last one compares with the layer's own forward.

    mask: bool (T, T) on the CPU (None: every key); output_diff and weights_diff:
    the largest |difference| between the steps' output (and softmax) and
    ``MultiHeadAttention.forward``'s on the same input, mask, RoPE and scale.
    """

    layer: int
    tokens: list[Token]
    n_input: int
    n_head: int
    n_kv_head: int
    head_dim: int
    d_model: int
    scale: float
    mask: Tensor | None
    steps: list[Step]
    output_diff: float
    weights_diff: float

    def step(self, key: str) -> Step:
        return next(s for s in self.steps if s.key == key)

    @property
    def mask_description(self) -> Text:
        """The layer's mask in words: "no mask (every key)", "causal", "causal, sliding window of 4"…"""
        return msg("mask_build.no_mask") if self.mask is None else _describe(self.mask)

    @property
    def output(self) -> Tensor:
        """The last step's output: (1, T, d_model)."""
        return self.steps[-1].tensors["output"]

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.steps)


def _spread(x: Tensor) -> tuple[float, float, float]:
    """min, max and standard deviation of the finite values of x (float64 on the CPU, float32 on an accelerator)."""
    finite = x[torch.isfinite(x)].to(reduction_dtype(x.device))
    if finite.numel() == 0:
        return 0.0, 0.0, 0.0
    std = float(finite.std()) if finite.numel() > 1 else 0.0
    return float(finite.min()), float(finite.max()), std


def _kv_sharing(n_head: int, n_kv_head: int) -> Text | str:
    if n_kv_head == n_head:
        return ""
    return msg("walkthrough_lib.kv_sharing", n_kv_head=n_kv_head, n_head=n_head, group=n_head // n_kv_head)


def project_step(mha: MultiHeadAttention, x: Tensor) -> Step:
    """x (B, T, d_model) -> q (B, T, n_head * head_dim), k and v (B, T, n_kv_head * head_dim)."""
    q = mha.w_q(x)  # (B, T, n_head * head_dim)
    k = mha.w_k(x)  # (B, T, n_kv_head * head_dim)
    v = mha.w_v(x)  # (B, T, n_kv_head * head_dim)
    change = msg(
        "walkthrough_lib.project_change",
        d_in=x.shape[-1],
        d_q=q.shape[-1],
        d_kv=k.shape[-1],
        sharing=_kv_sharing(mha.n_head, mha.n_kv_head),
    )
    return Step(
        "project",
        "1",
        msg("walkthrough_lib.project_title"),
        {"q": q, "k": k, "v": v},
        "q",
        FEATURES_BY_HEAD,
        msg("walkthrough_lib.project_axes"),
        (
            excerpt(MultiHeadAttention.__init__, (("self.w_q = nn.Linear", "self.w_v = nn.Linear"),), DEFINITION),
            excerpt(
                MultiHeadAttention.project_qkv,
                (("q = split_heads(self.w_q(", "v = split_heads(self.w_v("),),
                INNER_CALL,
                msg("walkthrough_lib.project_note"),
            ),
        ),
        change,
        head_dim=mha.head_dim,
    )


def split_step(mha: MultiHeadAttention, projected: Step) -> Step:
    """q (B, T, n_head * hd) -> (B, n_head, T, hd); k, v (B, T, n_kv_head * hd) -> (B, n_kv_head, T, hd)."""
    q = split_heads(projected.tensors["q"], mha.n_head)  # (B, n_head, T, head_dim)
    k = split_heads(projected.tensors["k"], mha.n_kv_head)  # (B, n_kv_head, T, head_dim)
    v = split_heads(projected.tensors["v"], mha.n_kv_head)  # (B, n_kv_head, T, head_dim)
    n_head, seq, head_dim = q.shape[1:]
    tutorial = msg("walkthrough_lib.tutorial_example") if (n_head, head_dim) == (8, 64) else ""
    change = msg(
        "walkthrough_lib.split_change",
        features=n_head * head_dim,
        n_head=n_head,
        head_dim=head_dim,
        seq=seq,
        tutorial=tutorial,
        n_kv_head=mha.n_kv_head,
    )
    return Step(
        "split",
        "2",
        msg("walkthrough_lib.split_title"),
        {"q": q, "k": k, "v": v},
        "q",
        HEAD_FEATURES,
        msg("walkthrough_lib.split_axes"),
        (whole(split_heads),),
        change,
    )


def rope_step(rotate: Callable, split: Step) -> Step:
    """q (B, n_head, T, hd) and k (B, n_kv_head, T, hd) rotated by position; same shapes."""
    q, k = split.tensors["q"], split.tensors["k"]
    positions = torch.arange(0, q.shape[2], device=q.device)  # (T,): as forward makes them without a KV cache
    q_rot, k_rot = rotate(q, k, positions)  # (B, n_head, T, hd), (B, n_kv_head, T, hd)
    norm_change = float((q_rot.norm(dim=-1) - q.norm(dim=-1)).abs().max()) if q.numel() else 0.0
    change = msg("walkthrough_lib.rope_change", last=q.shape[2] - 1, norm_change=norm_change)
    code = [whole(rotate)]
    for helper in _rope_helpers(rotate):
        code.append(whole(helper, CALLED_WITHIN))
    code.append(
        excerpt(
            MultiHeadAttention.project_qkv, (("if rotate is not None:", "q, k = rotate(q, k, positions)"),), INNER_CALL
        )
    )
    return Step(
        "rope",
        "2b",
        msg("walkthrough_lib.rope_title"),
        {"q": q_rot, "k": k_rot},
        "q",
        HEAD_FEATURES,
        msg("walkthrough_lib.rope_axes"),
        tuple(code),
        change,
    )


def _rope_helpers(rotate: Callable) -> list[Callable]:
    """The functions of attnviz.core.rope the hook calls by name (apply_rope), to show beside it."""
    from attnviz.core import rope

    names = rotate.__code__.co_names
    return [getattr(rope, name) for name in ("apply_rope",) if name in names]


def scores_step(q: Tensor, k: Tensor, n_head: int, n_kv_head: int) -> Step:
    """q (B, n_head, T, hd), k (B, n_kv_head, T, hd) -> q·kᵀ (B, n_head, T, T), before the scale."""
    scores = attention_scores(q, k, 1.0)  # (B, n_head, T, T)
    low, high, std = _spread(scores)
    gqa = msg("walkthrough_lib.scores_gqa", group=group_size(n_head, n_kv_head)) if n_kv_head < n_head else ""
    change = msg(
        "walkthrough_lib.scores_change",
        n_head=n_head,
        q_len=q.shape[2],
        k_len=k.shape[2],
        low=low,
        high=high,
        std=std,
        gqa=gqa,
    )
    return Step(
        "scores",
        "3",
        msg("walkthrough_lib.scores_title"),
        {"scores": scores},
        "scores",
        HEAD_SCORES,
        "(batch, n_head, q_len, k_len)",
        (whole(attention_scores, note=msg("walkthrough_lib.scores_note")),),
        change,
    )


def scale_step(q: Tensor, k: Tensor, scale: float, raw: Step) -> Step:
    """q·kᵀ times the layer's scale, as the forward computes it: attention_scores(q, k, scale), (B, n_head, T, T)."""
    scores = attention_scores(q, k, scale)  # (B, n_head, T, T)
    head_dim = q.shape[-1]
    named = f" = 1/√{head_dim}" if math.isclose(scale, 1.0 / math.sqrt(head_dim), rel_tol=1e-6) else ""
    change = msg(
        "walkthrough_lib.scale_change",
        scale=scale,
        named=named,
        before=_spread(raw.tensors["scores"])[2],
        after=_spread(scores)[2],
    )
    return Step(
        "scale",
        "4",
        msg("walkthrough_lib.scale_title"),
        {"scores": scores},
        "scores",
        HEAD_SCORES,
        "(batch, n_head, q_len, k_len)",
        (whole(attention_scores, note=msg("walkthrough_lib.scale_note", scale=scale)),),
        change,
    )


def _describe(mask: Tensor) -> Text:
    try:
        return KeyRanges.from_mask(mask.cpu()).describe()
    except ValueError:
        return msg("mask_build.custom")


def mask_step(mask: Tensor | None, scaled: Step) -> tuple[Step, Tensor | None]:
    """The layer's mask applied to the scaled scores (-inf where a query may not look): (B, n_head, T, T).

    Also returns ``dead``, the rows that see no key (None without a mask), which the softmax step needs.
    """
    dead = fully_masked_rows(mask)  # (..., q_len), None without a mask
    scores = apply_mask(scaled.tensors["scores"].clone(), mask)  # apply_mask writes in place
    T, S = scores.shape[-2:]
    hidden = 0 if mask is None else int((~mask.expand(T, S)).sum())
    if hidden == 0:
        change = msg("walkthrough_lib.mask_none" if mask is None else "walkthrough_lib.mask_nothing", S=S)
    else:
        change = msg("walkthrough_lib.mask_change", hidden=hidden, cells=T * S, mask=_describe(mask))
    step = Step(
        "mask",
        "5",
        msg("walkthrough_lib.mask_title"),
        {"scores": scores},
        "scores",
        HEAD_SCORES,
        "(batch, n_head, q_len, k_len)",
        (whole(apply_mask), whole(fully_masked_rows, note=msg("walkthrough_lib.mask_note"))),
        change,
    )
    return step, dead


def softmax_step(masked: Step, dead: Tensor | None) -> Step:
    """softmax over the keys of each row: (B, n_head, T, T) scores -> weights, each visible row summing to 1."""
    weights = attention_weights(masked.tensors["scores"].clone(), dead)  # (B, n_head, T, T); writes over its input
    took = _softmax if dead is None else masked_softmax
    alive = weights.sum(dim=-1, dtype=softmax_dtype(weights.dtype))  # (B, n_head, T), summed in float32 or wider
    dead_rows = None if dead is None else dead.expand(alive.shape)
    n_dead = 0 if dead is None else int(dead.sum())
    live = alive[~dead_rows] if n_dead else alive
    deviation = float((live - 1).abs().max()) if live.numel() else 0.0
    dead_note = (
        msg("walkthrough_lib.dead_one" if n_dead == 1 else "walkthrough_lib.dead_many", n_dead=n_dead) if n_dead else ""
    )
    change = msg(
        "walkthrough_lib.softmax_change", deviation=deviation, largest=float(weights.max()), dead_note=dead_note
    )
    return Step(
        "softmax",
        "6",
        msg("walkthrough_lib.softmax_title"),
        {"weights": weights},
        "weights",
        HEAD_WEIGHTS,
        "(batch, n_head, q_len, k_len)",
        (whole(attention_weights), whole(took, CALLED_WITHIN, msg("walkthrough_lib.softmax_note"))),
        change,
    )


def weighted_sum_step(weights: Tensor, v: Tensor) -> Step:
    """weights (B, n_head, T, T) · v (B, n_kv_head, T, hd) -> (B, n_head, T, hd)."""
    out = weighted_values(weights, v)  # (B, n_head, T, head_dim)
    n_head, T, head_dim = out.shape[1:]
    gqa = msg("walkthrough_lib.weighted_gqa", n_v=v.shape[1]) if v.shape[1] < n_head else ""
    change = msg(
        "walkthrough_lib.weighted_change",
        T=T,
        k_len=weights.shape[-1],
        v_len=v.shape[2],
        head_dim=head_dim,
        gqa=gqa,
    )
    return Step(
        "weighted",
        "7",
        msg("walkthrough_lib.weighted_title"),
        {"out": out},
        "out",
        HEAD_FEATURES,
        "(batch, n_head, seq, head_dim)",
        (whole(weighted_values),),
        change,
    )


def merge_step(out: Tensor) -> Step:
    """(B, n_head, T, hd) -> (B, T, n_head * hd)."""
    merged = merge_heads(out)  # (B, T, n_head * head_dim)
    n_head, _, head_dim = out.shape[1:]
    change = msg("walkthrough_lib.merge_change", n_head=n_head, head_dim=head_dim, width=n_head * head_dim)
    return Step(
        "merge",
        "8",
        msg("walkthrough_lib.merge_title"),
        {"merged": merged},
        "merged",
        FEATURES_BY_HEAD,
        "(batch, seq, n_head · head_dim)",
        (whole(merge_heads),),
        change,
        head_dim=head_dim,
    )


def _max_diff(a: Tensor, b: Tensor) -> float:
    return float((a - b).abs().max()) if a.numel() else 0.0


def output_step(mha: MultiHeadAttention, merged: Tensor, weights: Tensor, forward: tuple[Tensor, Tensor]) -> Step:
    """(B, T, n_head * hd) -> the layer's output (B, T, d_model), compared with ``forward``'s (output, weights)."""
    output = mha.w_o(merged)  # (B, T, d_model)
    output_diff, weights_diff = _max_diff(output, forward[0]), _max_diff(weights, forward[1])
    change = msg(
        "walkthrough_lib.output_change",
        n_head=mha.n_head,
        d_model=output.shape[-1],
        output_diff=output_diff,
        weights_diff=weights_diff,
    )
    return Step(
        "w_o",
        "9",
        msg("walkthrough_lib.output_title"),
        {"output": output},
        "output",
        FEATURES,
        "(batch, seq, d_model)",
        (
            excerpt(MultiHeadAttention.__init__, (("self.w_o = nn.Linear", "self.w_o = nn.Linear"),), DEFINITION),
            excerpt(
                MultiHeadAttention.forward,
                (("return self.w_o(merge_heads(out))", "return self.w_o(merge_heads(out))"),),
                INNER_CALL,
                msg("walkthrough_lib.output_note"),
            ),
        ),
        change,
    )


def _on_cpu(step: Step) -> Step:
    return replace(step, tensors={name: x.detach().cpu() for name, x in step.tensors.items()})


@torch.no_grad()
def walk(layer: LayerInput) -> Walkthrough:
    """Run ``layer``'s attention step by step; compare the result with the module's own forward."""
    mha, x = layer.attention, layer.hidden  # x: (1, T, d_model)
    if x.shape[1] == 0:
        raise ValueError(msg("walkthrough_lib.no_tokens"))
    steps = [project_step(mha, x)]
    steps.append(split_step(mha, steps[-1]))
    split = steps[-1]
    if layer.rotate is not None:
        steps.append(rope_step(layer.rotate, split))
    q, k, v = steps[-1].tensors["q"], steps[-1].tensors["k"], split.tensors["v"]
    steps.append(scores_step(q, k, mha.n_head, mha.n_kv_head))
    steps.append(scale_step(q, k, layer.scale, steps[-1]))
    masked, dead = mask_step(layer.mask, steps[-1])
    steps.append(masked)
    steps.append(softmax_step(masked, dead))
    weights = steps[-1].tensors["weights"]
    steps.append(weighted_sum_step(weights, v))
    steps.append(merge_step(steps[-1].tensors["out"]))
    forward = mha(x, x, x, mask=layer.mask, rotate=layer.rotate, scale=layer.scale)  # (1, T, d_model), weights
    steps.append(output_step(mha, steps[-1].tensors["merged"], weights, forward))
    return Walkthrough(
        layer=layer.layer,
        tokens=layer.tokens,
        n_input=layer.n_input,
        n_head=mha.n_head,
        n_kv_head=mha.n_kv_head,
        head_dim=mha.head_dim,
        d_model=mha.d_model,
        scale=layer.scale,
        mask=None if layer.mask is None else layer.mask.cpu(),
        steps=[_on_cpu(s) for s in steps],
        output_diff=_max_diff(steps[-1].tensors["output"], forward[0]),
        weights_diff=_max_diff(weights, forward[1]),
    )


def walk_source(
    source: AttentionSource, text: str, max_tokens: int, layer: int, progress: Progress | None = None
) -> Walkthrough:
    """:func:`walk` on layer ``layer`` of ``source`` as it ran on ``text``: the model's pass that gives the layer
    its input, then the walk (``progress``: a step each)."""
    progress = or_none(progress)
    progress.stage("progress.step", 2)
    layer_input = source.attention_layer(text, max_tokens, layer)
    progress.step()
    walked = walk(layer_input)
    progress.step()
    return walked

"""Our attention runs a pretrained model's real layers, and we measure how closely.

For every layer, the layer's own Q/K/V/O weights are copied into an
:class:`attnviz.attention.MultiHeadAttention`, fed the hidden states that really
entered that layer's attention (captured with a forward pre-hook), and its
weights are compared with the model's own eager attention weights.

Supported families: BERT-style encoders (separate query/key/value projections
with bias) and Llama-style decoders (q/k/v/o projections, RoPE, GQA). Our
layers get the mask each real layer applied (causal, a sliding window, padding),
read from the reference pass, so a model's quirks are compared, not assumed.
The reference holds every weight of every layer, so parity reads at most
``settings.PARITY_TOKENS`` tokens.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from attnviz import settings
from attnviz.attention import MultiHeadAttention, PositionRotation
from attnviz.masks import KeyRanges
from attnviz.rope import apply_rope, rope_rotation
from attnviz.source import ParityUnsupportedError
from attnviz.tokenizer import Token

if TYPE_CHECKING:
    from attnviz.hf_source import HFSource

BERT_STYLE = {"bert", "roberta", "xlm-roberta", "camembert", "electra"}
LLAMA_STYLE = {"llama", "mistral", "qwen2"}
PARITY_TOLERANCE = 1e-5  # float32: the largest |ours - model| over every weight that counts as equal


def supports(config) -> bool:
    """Whether our layers can reproduce this model family's attention."""
    return config.model_type in BERT_STYLE | LLAMA_STYLE


@dataclass(eq=False)
class Parity:
    """ours and theirs: (n_layer, n_head, T, T); max_abs_diff: (n_layer, n_head); keys: the mask of each layer;
    tokens: what was read (filled in by the source that ran the check)."""

    ours: Tensor
    theirs: Tensor
    max_abs_diff: Tensor
    keys: list[KeyRanges]
    tokens: list[Token] = field(default_factory=list)

    @property
    def masks(self) -> list[str]:
        """Each layer's mask, described ("causal", "causal, sliding window of 4")."""
        return [k.describe() for k in self.keys]

    @property
    def worst(self) -> float:
        return float(self.max_abs_diff.max()) if self.max_abs_diff.numel() else 0.0

    @property
    def matches(self) -> bool:
        return self.worst <= PARITY_TOLERANCE

    @property
    def nbytes(self) -> int:
        return (self.ours.numel() + self.theirs.numel()) * 4


def _copy_linear(dst: nn.Linear, src: nn.Linear) -> None:
    dst.weight.copy_(src.weight)
    if dst.bias is not None:
        if src.bias is not None:
            dst.bias.copy_(src.bias)
        else:
            dst.bias.zero_()


def _rope_parameters(config) -> dict:
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    params = dict(params)
    params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    params.setdefault("rope_type", params.get("type", "default"))
    return params


def _model_rotation(rotary: nn.Module) -> PositionRotation:
    """RoPE variants other than the default take their angles from the model's own module."""

    def rotate(q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        cos, sin = rotary(q, positions[None])  # (1, T, head_dim)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin)

    return rotate


def our_layers(hf: HFSource) -> tuple[list[nn.Module], list[MultiHeadAttention], PositionRotation | None]:
    """The model's attention modules and our copies of them, plus the RoPE hook (decoders)."""
    config = hf.config
    model_type = config.model_type
    base = hf.model.base_model
    ours: list[MultiHeadAttention] = []
    with torch.no_grad():
        if model_type in BERT_STYLE:
            if getattr(config, "position_embedding_type", "absolute") != "absolute":
                raise ParityUnsupportedError(f"relative position embeddings ({config.position_embedding_type})")
            theirs = [layer.attention.self for layer in base.encoder.layer]
            for layer in base.encoder.layer:
                attn = layer.attention
                mha = MultiHeadAttention(config.hidden_size, config.num_attention_heads, bias=True)
                _copy_linear(mha.w_q, attn.self.query)
                _copy_linear(mha.w_k, attn.self.key)
                _copy_linear(mha.w_v, attn.self.value)
                _copy_linear(mha.w_o, attn.output.dense)
                ours.append(mha)
            rotate = None
        elif model_type in LLAMA_STYLE:
            theirs = [layer.self_attn for layer in base.layers]
            head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
            for attn in theirs:
                has_bias = attn.q_proj.bias is not None
                mha = MultiHeadAttention(
                    config.hidden_size,
                    config.num_attention_heads,
                    n_kv_head=config.num_key_value_heads,
                    bias=has_bias,
                    head_dim=head_dim,
                )
                for dst, src in [(mha.w_q, attn.q_proj), (mha.w_k, attn.k_proj), (mha.w_v, attn.v_proj)]:
                    _copy_linear(dst, src)
                mha.w_o.weight.copy_(attn.o_proj.weight)
                if mha.w_o.bias is not None:
                    mha.w_o.bias.zero_()
                ours.append(mha)
            params = _rope_parameters(config)
            if params["rope_type"] == "default":
                rotate = rope_rotation(head_dim, float(params["rope_theta"]))
            else:
                rotate = _model_rotation(base.rotary_emb)
        else:
            raise ParityUnsupportedError(
                f"parity covers BERT-style ({', '.join(sorted(BERT_STYLE))}) and Llama-style "
                f"({', '.join(sorted(LLAMA_STYLE))}) models, not {model_type!r}"
            )
    device = next(hf.model.parameters()).device
    return theirs, [m.to(device).eval() for m in ours], rotate


@torch.no_grad()
def reproduce(hf: HFSource, ids: list[int]) -> Parity:
    """Run our layers on the inputs and masks each real attention layer saw; compare every head."""
    if len(ids) > settings.PARITY_TOKENS:
        raise ValueError(f"parity reads at most {settings.PARITY_TOKENS} tokens, not {len(ids)}")
    theirs_modules, ours, rotate = our_layers(hf)
    captured: list[Tensor] = []
    owner = threading.get_ident()

    def grab(module, args, kwargs):
        # the model is shared between sessions: record only this thread's forward pass
        if threading.get_ident() == owner:
            captured.append(args[0] if args else kwargs["hidden_states"])

    hooks = [m.register_forward_pre_hook(grab, with_kwargs=True) for m in theirs_modules]
    try:
        theirs_w, keys = hf.reference_pass(ids)  # (n_layer, n_head, T, T), each layer's mask
    finally:
        for hook in hooks:
            hook.remove()
    mine = []
    for module, mha, hidden, layer_keys in zip(theirs_modules, ours, captured, keys, strict=True):
        mask = layer_keys.dense().to(hidden.device)  # (T, T): what the model's own layer applied
        _, weights = mha(hidden, hidden, hidden, mask=mask, rotate=rotate, scale=getattr(module, "scaling", None))
        mine.append(weights[0])  # (n_head, T, T)
    ours_w = torch.stack(mine).float().cpu()  # (n_layer, n_head, T, T)
    diff = (ours_w - theirs_w).abs().amax(dim=(-2, -1)) if len(ids) else torch.zeros(ours_w.shape[:2])
    return Parity(ours=ours_w, theirs=theirs_w, max_abs_diff=diff, keys=keys)

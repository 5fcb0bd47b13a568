"""Our attention runs a pretrained model's real layers, and we measure how closely.

For every layer, the layer's own Q/K/V/O weights are copied into an
:class:`attnviz.core.attention.MultiHeadAttention`, fed the hidden states that really
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

import math
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from attnviz import settings
from attnviz.core.attention import MultiHeadAttention, PositionRotation
from attnviz.core.devices import dtype_name
from attnviz.core.masks import KeyRanges
from attnviz.core.rope import apply_rope, rope_rotation
from attnviz.errors import ModelUnavailableError, ParityUnsupportedError
from attnviz.i18n.message import Message, msg
from attnviz.models.record import PARITY_TOLERANCE, PARITY_TOLERANCES, Parity
from attnviz.models.source import LayerInput, check_layer


class Reproducible(Protocol):
    """What parity reads of a loaded Hugging Face model (an :class:`~attnviz.models.hf.source.HFSource` is one)."""

    model: torch.nn.Module
    n_head: int
    n_kv_head: int

    @property
    def config(self) -> Any: ...

    def reference_pass(self, ids: list[int]) -> tuple[Tensor, list[KeyRanges]]: ...


BERT_STYLE = {"bert", "roberta", "xlm-roberta", "camembert", "electra"}
LLAMA_STYLE = {"llama", "mistral", "qwen2"}


# Known bugs the Parity page can put into our layers, to show that the check can fail.
BUGS = {
    "sqrt_dmodel": "scale by 1/√d_model instead of 1/√d_k",
    "no_scale": "no scale at all",
    "no_rope": "RoPE dropped",
    "kv_tiled": "K/V heads shared wrongly: tiled (repeat) instead of grouped (repeat_interleave)",
}


def bug_title(name: str) -> Message:
    """A bug of :data:`BUGS` as a message, to show (:data:`BUGS` keeps the English, for the CLI)."""
    titles = {
        "sqrt_dmodel": msg("parity.bug_sqrt_dmodel"),
        "no_scale": msg("parity.bug_no_scale"),
        "no_rope": msg("parity.bug_no_rope"),
        "kv_tiled": msg("parity.bug_kv_tiled"),
    }
    return titles[name]


def available_bugs(hf: Reproducible) -> dict[str, str]:
    """The bugs that can be put into this model's layers: RoPE only for rotary decoders, K/V sharing only for GQA."""
    names = ["sqrt_dmodel", "no_scale"]
    if hf.config.model_type in LLAMA_STYLE:
        names.append("no_rope")
    if hf.n_kv_head < hf.n_head:
        names.append("kv_tiled")
    return {name: BUGS[name] for name in names}


def supports(config) -> bool:
    """Whether our layers can reproduce this model family's attention."""
    return config.model_type in BERT_STYLE | LLAMA_STYLE


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


def _copy_tiled(dst: nn.Linear, src: nn.Linear, n_kv_head: int, n_head: int) -> None:
    """K or V projections for n_head heads where head h reads K/V head h % n_kv_head (the tiling bug):
    weight (n_kv_head * hd, d_model) -> (n_head * hd, d_model), bias alike."""
    heads = [h % n_kv_head for h in range(n_head)]
    per_head = src.weight.view(n_kv_head, -1, src.weight.shape[-1])  # (n_kv_head, hd, d_model)
    dst.weight.copy_(torch.cat([per_head[h] for h in heads]))
    if src.bias is not None:
        dst.bias.copy_(torch.cat([src.bias.view(n_kv_head, -1)[h] for h in heads]))


def _unsupported(config) -> ParityUnsupportedError:
    return ParityUnsupportedError(
        msg(
            "model_errors.parity_families",
            bert=", ".join(sorted(BERT_STYLE)),
            llama=", ".join(sorted(LLAMA_STYLE)),
            model_type=repr(config.model_type),
        )
    )


def real_layers(hf: Reproducible) -> list[nn.Module]:
    """The model's attention modules our layers copy, in order (each one's forward pre-hook sees its input);
    ParityUnsupportedError for a family we cannot reproduce (or BERT with relative positions)."""
    config, base = hf.config, hf.model.base_model
    if config.model_type in BERT_STYLE:
        if getattr(config, "position_embedding_type", "absolute") != "absolute":
            raise ParityUnsupportedError(msg("model_errors.relative_positions", kind=config.position_embedding_type))
        return [layer.attention.self for layer in base.encoder.layer]
    if config.model_type in LLAMA_STYLE:
        return [layer.self_attn for layer in base.layers]
    raise _unsupported(config)


def rotation(hf: Reproducible) -> PositionRotation | None:
    """The RoPE hook our copies of a decoder's layers rotate q and k with; None for an encoder (no RoPE)."""
    config = hf.config
    if config.model_type not in LLAMA_STYLE:
        return None
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    params = _rope_parameters(config)
    if params["rope_type"] == "default":
        return rope_rotation(head_dim, float(params["rope_theta"]))
    return _model_rotation(hf.model.base_model.rotary_emb)


@contextmanager
def _weights_in_memory(module: nn.Module) -> Iterator[None]:
    """``module``'s weights where its forward pass reads them: a layer that accelerate offloaded to the CPU or to
    disk (a device map) has them loaded onto its execution device for the block, as its own forward does."""
    from accelerate.utils import align_module_device

    with ExitStack() as stack:
        for part in module.modules():
            stack.enter_context(align_module_device(part))
        yield


def _empty_copy(device: torch.device, dtype: torch.dtype, *args, **kwargs) -> MultiHeadAttention:
    """A MultiHeadAttention of the given sizes, in ``dtype`` on ``device``, its weights not yet set."""
    with torch.device("meta"):
        mha = MultiHeadAttention(*args, **kwargs).to(dtype)
    return mha.to_empty(device=device)


@torch.no_grad()
def layer_copy(hf: Reproducible, index: int, tile_kv: bool = False) -> MultiHeadAttention:
    """Layer ``index`` of the model as our MultiHeadAttention: its own Q/K/V/O weights, in their dtype (the model's:
    bfloat16 weights give a bfloat16 copy, which reproduces the model's own arithmetic) and on the device its
    forward pass runs on, in eval mode.

    ``tile_kv`` builds the copy with the classic GQA bug: query head h reads K/V head h % n_kv_head instead of
    h // (n_head / n_kv_head).
    """
    config = hf.config
    if config.model_type in BERT_STYLE:
        attn = hf.model.base_model.encoder.layer[index].attention
        with _weights_in_memory(attn):
            weight = attn.self.query.weight
            mha = _empty_copy(weight.device, weight.dtype, config.hidden_size, config.num_attention_heads, bias=True)
            _copy_linear(mha.w_q, attn.self.query)
            _copy_linear(mha.w_k, attn.self.key)
            _copy_linear(mha.w_v, attn.self.value)
            _copy_linear(mha.w_o, attn.output.dense)
        return mha.eval()
    if config.model_type not in LLAMA_STYLE:
        raise _unsupported(config)
    attn = hf.model.base_model.layers[index].self_attn
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    n_head, n_kv_head = config.num_attention_heads, config.num_key_value_heads
    with _weights_in_memory(attn):
        weight = attn.q_proj.weight
        mha = _empty_copy(
            weight.device,
            weight.dtype,
            config.hidden_size,
            n_head,
            n_kv_head=n_head if tile_kv else n_kv_head,
            bias=attn.q_proj.bias is not None,
            head_dim=head_dim,
        )
        _copy_linear(mha.w_q, attn.q_proj)
        if tile_kv:
            _copy_tiled(mha.w_k, attn.k_proj, n_kv_head, n_head)
            _copy_tiled(mha.w_v, attn.v_proj, n_kv_head, n_head)
        else:
            _copy_linear(mha.w_k, attn.k_proj)
            _copy_linear(mha.w_v, attn.v_proj)
        mha.w_o.weight.copy_(attn.o_proj.weight)
        if mha.w_o.bias is not None:
            mha.w_o.bias.zero_()
    return mha.eval()


@torch.no_grad()
def reproduce(hf: Reproducible, ids: list[int], bug: str | None = None) -> Parity:
    """Run our layers on the inputs and masks each real attention layer saw; compare every head.

    Our copies run in the model's dtype (:func:`layer_copy`), so a bfloat16 model is compared with bfloat16
    arithmetic, within that dtype's tolerance (:data:`attnviz.models.record.PARITY_TOLERANCES`).

    ``bug`` (a key of :func:`available_bugs`) puts a known mistake into our layers, to see the check fail.
    """
    if len(ids) > settings.PARITY_TOKENS:
        raise ValueError(f"parity reads at most {settings.PARITY_TOKENS} tokens, not {len(ids)}")
    if bug is not None and bug not in available_bugs(hf):
        raise ValueError(f"bug {bug!r} does not apply to this model; choose from {list(available_bugs(hf))}")
    theirs_modules = real_layers(hf)
    rotate = None if bug == "no_rope" else rotation(hf)
    inputs: list[tuple[int, Tensor]] = []  # what entered each of their layers, in call order (``attn.in``)
    theirs_w, keys = hf.reference_pass(ids, {"attn.in": lambda layer, hidden: inputs.append((layer, hidden))})
    captured = [hidden for _, hidden in inputs]  # (n_layer, n_head, T, T) weights; each layer's mask
    mine, dtype = [], None
    for index, (module, hidden, layer_keys) in enumerate(zip(theirs_modules, captured, keys, strict=True)):
        mha = layer_copy(hf, index, tile_kv=bug == "kv_tiled")  # one layer's copy at a time, dropped after it ran
        dtype = mha.w_q.weight.dtype
        mask = layer_keys.dense().to(hidden.device)  # (T, T): what the model's own layer applied
        scale = {"sqrt_dmodel": mha.d_model**-0.5, "no_scale": 1.0}.get(bug, getattr(module, "scaling", None))
        _, weights = mha(hidden, hidden, hidden, mask=mask, rotate=rotate, scale=scale)
        mine.append(weights[0].float().cpu())  # (n_head, T, T): each layer's from wherever it ran
    ours_w = torch.stack(mine)  # (n_layer, n_head, T, T)
    diff = (ours_w - theirs_w).abs().amax(dim=(-2, -1)) if len(ids) else torch.zeros(ours_w.shape[:2])
    tolerance = PARITY_TOLERANCES.get(dtype_name(dtype), PARITY_TOLERANCE) if dtype is not None else PARITY_TOLERANCE
    return Parity(ours=ours_w, theirs=theirs_w, max_abs_diff=diff, keys=keys, bug=bug, tolerance=tolerance)


@torch.no_grad()
def layer_inputs(source, text: str, max_tokens: int, layers: Sequence[int] | None = None) -> list[LayerInput]:
    """Layers ``layers`` (default: all) of ``source`` as our MultiHeadAttention (a copy of their weights), the hidden
    states that really entered each (its ``attn.in`` hook point, in the model's own reference pass) and the mask it
    applied: :meth:`HFSource.attention_layers`. Reads at most settings.PARITY_TOKENS tokens."""
    if not source.supports_parity:
        raise ParityUnsupportedError(msg("model_errors.no_parity", model_type=repr(source.config.model_type)))
    layers = list(range(source.n_layer)) if layers is None else list(layers)
    for layer in layers:
        check_layer(layer, source.n_layer)
    encoding = source.encode(text, min(max_tokens, settings.PARITY_TOKENS))
    theirs, rotate = real_layers(source), rotation(source)
    captured: dict[int, Tensor] = {}
    wanted = set(layers)

    def keep(layer: int, hidden: Tensor) -> None:
        if layer in wanted:
            captured.setdefault(layer, hidden)

    _, keys = source.reference_pass(encoding.ids, {"attn.in": keep})
    missing = sorted(set(layers) - set(captured))
    if missing:
        raise ModelUnavailableError(msg("model_errors.layer_did_not_run", name=source.name, layer=missing[0]))
    inputs = []
    for layer in layers:
        hidden = captured[layer]  # (1, T, d_model)
        scale = getattr(theirs[layer], "scaling", None)
        inputs.append(
            LayerInput(
                layer=layer,
                attention=layer_copy(source, layer),  # only the layers asked for: a copy each
                hidden=hidden,
                mask=keys[layer].dense().to(hidden.device),  # (T, T): what the model's own layer applied
                rotate=rotate,
                scale=float(scale) if scale is not None else 1.0 / math.sqrt(source.head_dim),
                tokens=encoding.tokens,
                n_input=encoding.n_input,
            )
        )
    return inputs

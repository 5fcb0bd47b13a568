"""Head ablation inside a model's layers: rewriting some heads' slice of the input to the output projection.

One mechanism for every model: hook functions (:func:`ablation_hooks`) at the ``attn.z`` point of a pass
(:mod:`attnviz.models.hf.points`; the embedded model serves the same points in its own pass,
:mod:`attnviz.models.embedded.hooked`): the layer's output is computed as usual, then the ablated heads' slice of it, which is exactly what the output projection reads for that head
(TransformerLens' ``hook_z``), is replaced:

- ``zero``: 0 at every position;
- ``mean``: its mean over the text's positions;
- ``first``: what the head outputs when it attends only to the first token, that token's value vector
  (the head's key/value head under GQA), at every position.

A batch may ablate different heads in each row (the single-head sweep runs one head per row), so the heads are
given per row. A row that ablates nothing is returned bit for bit as it came.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from attnviz.i18n.message import msg
from attnviz.settings import ABLATION_MODES

Head = tuple[int, int]  # (layer, head)


def check_mode(mode: str) -> str:
    """``mode`` if it is one of :data:`ABLATION_MODES`; ValueError naming them otherwise."""
    if mode not in ABLATION_MODES:
        raise ValueError(msg("ablation_lib.bad_mode", mode=mode, modes=", ".join(ABLATION_MODES)))
    return mode


def ablate_output(output: Tensor, value: Tensor, heads: Tensor, mode: str) -> Tensor:
    """One layer's attention output with some heads rewritten: (B, T, n_head, hd) -> (B, T, n_head, hd).

    value: (B, n_kv_head, S, hd), the layer's values (``first`` reads key 0's); heads: bool (B, n_head), True
    where row b ablates head h. Rows and heads not ablated keep their exact values. ``heads`` on the host lets a
    layer that ablates nothing return at once; on a GPU, reading it would wait for the GPU, so it is applied as is.
    """
    check_mode(mode)
    if heads.device.type == "cpu" and not bool(heads.any()):
        return output
    n_head = output.shape[2]
    if mode == "zero":
        replacement = torch.zeros((), dtype=output.dtype, device=output.device)
    elif mode == "mean":
        replacement = output.float().mean(dim=1, keepdim=True).to(output.dtype)  # (B, 1, n_head, hd)
    else:
        n_kv_head = value.shape[1]
        group = n_head // n_kv_head
        first = value[:, :, 0].repeat_interleave(group, dim=1)  # (B, n_head, hd): each query head's kv head
        replacement = first[:, None].to(output.dtype)  # (B, 1, n_head, hd)
    where = heads.to(output.device)[:, None, :, None]  # (B, 1, n_head, 1)
    return torch.where(where, replacement, output)


def heads_of(
    rows: Sequence[Sequence[Head]], n_head: int, layer: int, batch: int, device: torch.device | str | None = None
) -> Tensor:
    """bool (batch, n_head): True where row b ablates head h of ``layer``; one row set repeats over a batch."""
    if batch % max(1, len(rows)) != 0:
        raise ValueError(f"{len(rows)} rows of heads for a batch of {batch}")
    mask = torch.zeros(len(rows), n_head, dtype=torch.bool)
    for row, heads in enumerate(rows):
        for at, head in heads:
            if at == layer:
                mask[row, head] = True
    return mask.repeat(batch // max(1, len(rows)), 1).to(device)


def ablation_hooks(rows: Sequence[Sequence[Head]], mode: str, n_head: int) -> dict[str, Callable]:
    """The hook functions of a pass that ablates ``rows`` (row b ablates ``rows[b]``) by ``mode``
    (:func:`attnviz.models.hf.points.run`): ``attn.z`` rewrites the heads' output; ``first`` also reads each
    ablated layer's values at ``attn.qkv``."""
    check_mode(mode)
    layers = {layer for heads in rows for layer, _ in heads}
    values: dict[int, Tensor] = {}

    def read(layer: int, query: Tensor, key: Tensor, value: Tensor) -> None:
        if layer in layers:
            values[layer] = value  # (B, n_kv_head, S, hd)

    def ablate(layer: int, z: Tensor) -> Tensor:
        heads = heads_of(rows, n_head, layer, z.shape[0])  # on the host: no GPU wait
        return ablate_output(z, values.get(layer, z), heads, mode)

    return {"attn.z": ablate, "attn.qkv": read} if mode == "first" else {"attn.z": ablate}


def check_ran(rows: Sequence[Sequence[Head]], layers_run: int, name: str) -> None:
    """ValueError when a row asked for a layer the pass never ran (a hybrid's non-attention layer)."""
    wanted = max((layer for heads in rows for layer, _ in heads), default=-1)
    if wanted >= layers_run:
        raise ValueError(msg("ablation_lib.layer_not_run", name=name, layer=wanted, n=layers_run))

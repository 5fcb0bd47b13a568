"""Head ablation inside a model's layers: rewriting some heads' slice of the input to the output projection.

One function, shared by every route that runs attention itself (attnviz's own layers, transformers'
``AttentionInterface``): the layer's output is computed as usual, then the ablated heads' slice of it, which is
exactly what the output projection reads for that head (TransformerLens' ``hook_z``), is replaced:

- ``zero``: 0 at every position;
- ``mean``: its mean over the text's positions;
- ``first``: what the head outputs when it attends only to the first token, that token's value vector
  (the head's key/value head under GQA), at every position.

A batch may ablate different heads in each row (the single-head sweep runs one head per row), so the heads are
given per row. A row that ablates nothing is returned bit for bit as it came.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

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


@dataclass(eq=False)
class HeadAblation:
    """Which heads each row of a batch ablates, for a pass through a model's attention layers.

    rows: for each batch row, the (layer, head) pairs it ablates; mode: one of :data:`ABLATION_MODES`;
    n_head: query heads per layer. ``layers_seen`` counts the attention layers the pass ran, in order of their
    calls (a hybrid's other layers never call: its softmax layers are numbered 0, 1, … among themselves).
    """

    rows: Sequence[Sequence[Head]]
    mode: str
    n_head: int
    layers_seen: int = 0
    _last: tuple[object, object] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_mode(self.mode)

    def next_layer(self, module: object, query: Tensor) -> int:
        """The index of the layer this call belongs to: a new one unless it repeats the last call (the same module
        on the same q: DiffLlama calls attention twice per layer). A module shared by every layer (ALBERT) gets a
        new q each time, so each of its calls is a layer, as the capture counts them."""
        if self._last is not None and self._last[0] is module and self._last[1] is query:
            return self.layers_seen - 1
        self._last = (module, query)
        self.layers_seen += 1
        return self.layers_seen - 1

    def heads_of(self, layer: int, batch: int, device: torch.device | str | None = None) -> Tensor:
        """bool (batch, n_head): True where row b ablates head h of ``layer``; one row set repeats over a batch."""
        if batch % max(1, len(self.rows)) != 0:
            raise ValueError(f"{len(self.rows)} rows of heads for a batch of {batch}")
        mask = torch.zeros(len(self.rows), self.n_head, dtype=torch.bool)
        for row, heads in enumerate(self.rows):
            for at, head in heads:
                if at == layer:
                    mask[row, head] = True
        return mask.repeat(batch // max(1, len(self.rows)), 1).to(device)

    def apply(self, module: object, query: Tensor, output: Tensor, value: Tensor) -> Tensor:
        """The output (B, T, n_head, hd) of ``module``'s call with this pass's ablated heads rewritten."""
        layer = self.next_layer(module, query)
        return ablate_output(output, value, self.heads_of(layer, output.shape[0]), self.mode)  # heads on the host

    def check_ran(self, name: str) -> None:
        """ValueError when a row asked for a layer the pass never ran (a hybrid's non-attention layer)."""
        wanted = max((layer for heads in self.rows for layer, _ in heads), default=-1)
        if wanted >= self.layers_seen:
            raise ValueError(msg("ablation_lib.layer_not_run", name=name, layer=wanted, n=self.layers_seen))

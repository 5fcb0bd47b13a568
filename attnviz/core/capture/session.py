"""One forward pass captured layer by layer: the session a model's attention calls once per layer."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from attnviz.core.capture import fused
from attnviz.core.capture.kernel import capture_attention
from attnviz.core.capture.layer import LayerCapture, pool_bin
from attnviz.core.masks import KeyRanges


class CaptureSession:
    """One forward pass captured layer by layer, for each sequence of a batch.

    A model's attention calls :meth:`attend` once per layer, in order, with its
    q, k and v; each sequence gets its own list of :class:`LayerCapture`.
    ``statistics_only``: a pass that reads only the row statistics (a corpus's): no pooled maps are made, a key's
    value norm is small against the keys its sequence's queries see, so a padded batch's pads never count; and where
    :data:`attnviz.core.capture.fused.STATISTICS_ROUTE` is "fused", a layer whose mask the fused kernel applies
    takes that route (statistics and output, no pooled maps, no q or k; ``LayerCapture.route`` says which route
    each layer took). It is "reference" by default: measured slower on the CPU (see that module).
    """

    def __init__(
        self,
        batch: int,
        q_len: int,
        n_heads_total: int,
        keep_qk: bool = True,
        on_layer: Callable[[], None] | None = None,
        out_factors: Mapping[object, Tensor] | None = None,
        statistics_only: bool = False,
    ) -> None:
        self.bin_size = pool_bin(q_len, n_heads_total)
        self.keep_qk = keep_qk
        self.statistics_only = statistics_only  # a statistics pass (a corpus): pads never count, nothing else read
        self.out_factors = out_factors or {}  # attention module -> its output projection's factors (value norms)
        self.layers: list[list[LayerCapture]] = [[] for _ in range(batch)]
        self._last: tuple[object, Tensor] | None = None
        self._on_layer = on_layer  # called after each layer is captured (a progress bar's step)

    def seen(self, module: object, q: Tensor) -> bool:
        """Whether this call repeats the last one, the same module on the same q tensor (DiffLlama calls
        attention twice per layer with one q and k, for two halves of v): then it is no new layer. A module
        shared by every layer (ALBERT) gets a new q each time, so each of its calls is a layer."""
        if self._last is not None and self._last[0] is module and self._last[1] is q:
            return True
        self._last = (module, q)
        return False

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        keys: list[KeyRanges],
        scale: float,
        softcap: float | None = None,
        sinks: Tensor | None = None,
        module: object | None = None,
    ) -> Tensor:
        """q (B, n_head, T, hd), k and v (B, n_kv_head, S, hd), one mask per sequence -> output (B, n_head, T, hd).

        ``module``: the attention layer calling; where the session has its output projection's factors, the
        capture keeps the value norms (attnviz.core.value_norms).
        """
        factors = self.out_factors.get(module) if module is not None else None
        if len(keys) != q.shape[0] or len(self.layers) != q.shape[0]:
            raise ValueError(f"{len(keys)} masks and {len(self.layers)} sequences for a batch of {q.shape[0]}")
        outputs = []
        for b, sequence in enumerate(self.layers):
            if (
                self.statistics_only
                and fused.STATISTICS_ROUTE == "fused"
                and fused.fused_route(keys[b], softcap, q.device)
            ):
                out, capture = fused.fused_attention(
                    q[b], k[b], v[b], keys[b], scale=scale, sinks=sinks, out_factors=factors, seen_keys_only=True
                )
                sequence.append(capture)
                outputs.append(out)
                continue
            out, capture = capture_attention(
                q[b],
                k[b],
                v[b],
                keys[b],
                scale=scale,
                bin_size=self.bin_size,
                softcap=softcap,
                keep_qk=self.keep_qk,
                sinks=sinks,
                out_factors=factors,
                seen_keys_only=self.statistics_only,
                pooled=not self.statistics_only,
            )
            sequence.append(capture)
            outputs.append(out)
        if self._on_layer is not None:
            self._on_layer()
        return torch.stack(outputs)  # (B, n_head, T, hd)

"""The KV page's two figures side by side: attnviz's minimum and transformers' cache, and why they differ.

The page prints :func:`~attnviz.labs.kv.memory.estimate` (the minimum) beside transformers' ``DynamicCache``
figure (:func:`~attnviz.labs.kv.engines.measured_hf_bytes`: the architecture's own modeling code run on the meta
device, or its rule where that code cannot run). They must agree to the byte, or say why not. Each difference
attnviz knows is computed here from the config alone, with the bytes it accounts for, so that a check can
require the reasons to add up to the whole difference:

- ``sliding``: a sliding layer of window W keeps the last W - 1 tokens in transformers' cache between steps
  (the next token attends to itself and the W - 1 before it), while the minimum counts the W tokens a step
  attends over, the new token's row included;
- ``paged``: with a block size the minimum is rounded up to whole blocks; ``DynamicCache`` is contiguous;
- ``broadcast``: Falcon's new decoder architecture repeats each K and V head for every query head before it
  caches them (``modeling_falcon.py``);
- ``other``: what is left, said with its size: attnviz does not know where it comes from.

Both sides count the same dtype (transformers' cache stores the activations' dtype, and its figure is its
elements at the page's dtype) and neither counts a linear-attention layer's recurrent state.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnviz import settings
from attnviz.i18n.message import Text, msg
from attnviz.labs.kv.config import KVConfig
from attnviz.labs.kv.engines import HF_DTYPES, falcon_broadcast, hf_rule_bytes, measured_hf_bytes
from attnviz.labs.kv.memory import bytes_per_element, estimate, held_tokens, layer_token_bytes

REASONS = ("sliding", "paged", "broadcast", "other")


@dataclass(frozen=True)
class Reason:
    """One cause of a difference: its kind (one of :data:`REASONS`), the bytes it accounts for (transformers'
    figure minus the minimum, so negative where transformers holds less) and the sentence that says it."""

    kind: str
    bytes: int
    text: Text


@dataclass(frozen=True)
class KVAgreement:
    """attnviz's minimum beside transformers' figure for one batch, length, dtype and block size.

    measured: transformers' figure came from its modeling code (False: from its rule, the code could not run
    on the meta device). reasons: every known cause of the difference, whose bytes add up to ``difference``
    (an ``other`` reason carries what no known cause explains); empty when nothing differs, and kept when
    causes cancel (Falcon-40B's 16-fold heads in a one-token prefill against blocks of 16: equal, not alike).
    """

    minimum: int
    transformers: int
    measured: bool
    reasons: tuple[Reason, ...]

    @property
    def difference(self) -> int:
        return self.transformers - self.minimum

    @property
    def agrees(self) -> bool:
        """The bound is exact: the same bytes, or a reason."""
        return self.difference == 0

    @property
    def explained(self) -> int:
        """The bytes the known causes account for (every reason but ``other``)."""
        return sum(r.bytes for r in self.reasons if r.kind != "other")


def _sliding_reason(cfg: KVConfig, batch: int, seq_len: int, dtype: str) -> Reason | None:
    layers = cfg.layer_kinds.count("sliding")
    if not layers:
        return None
    held = held_tokens(cfg, "sliding", seq_len)  # min(seq_len, window)
    kept = len(range(seq_len)[-cfg.window + 1 :])  # DynamicSlidingWindowLayer keeps [-sliding_window + 1:]
    dropped = batch * layers * (held - kept) * layer_token_bytes(cfg, "sliding", dtype)
    if not dropped:
        return None
    text = msg("kv_agree.sliding", layers=layers, window=cfg.window, kept=kept, held=held, bytes=-dropped)
    return Reason("sliding", -dropped, text)


def _broadcast_reason(cfg: KVConfig, batch: int, seq_len: int, dtype: str) -> Reason | None:
    if not falcon_broadcast(cfg) or cfg.n_kv_head == cfg.n_head:
        return None
    extra_heads = cfg.n_head - cfg.n_kv_head
    per_token = sum(
        2 * extra_heads * cfg.head_dim * held_tokens(cfg, kind, seq_len) for kind in cfg.layer_kinds if kind != "linear"
    )
    extra = int(batch * per_token * bytes_per_element(dtype))
    text = msg("kv_agree.broadcast", n_kv_head=cfg.n_kv_head, n_head=cfg.n_head, bytes=extra)
    return Reason("broadcast", extra, text)


def transformers_agreement(
    cfg: KVConfig,
    batch: int,
    seq_len: int,
    dtype: str = "bf16",
    block_size: int | None = None,
    group_size: int = settings.KV_GROUP_SIZE,
) -> KVAgreement | None:
    """The page's minimum (with its block size) beside transformers' ``DynamicCache`` figure, with every reason
    they differ; None for a dtype ``DynamicCache`` does not store (fp8, int8, int4: no figure is printed)."""
    minimum = estimate(cfg, batch, seq_len, dtype, group_size, block_size).total_bytes
    if dtype not in HF_DTYPES:
        return None
    measured = measured_hf_bytes(cfg, batch, seq_len, dtype)
    figure = hf_rule_bytes(cfg, batch, seq_len, dtype) if measured is None else measured
    reasons = []
    contiguous = estimate(cfg, batch, seq_len, dtype, group_size).total_bytes
    if contiguous != minimum:
        reasons.append(
            Reason("paged", contiguous - minimum, msg("kv_agree.paged", block=block_size, bytes=contiguous - minimum))
        )
    sliding = _sliding_reason(cfg, batch, seq_len, dtype)
    if sliding is not None:
        reasons.append(sliding)
    broadcast = _broadcast_reason(cfg, batch, seq_len, dtype) if measured is not None else None
    if broadcast is not None:
        reasons.append(broadcast)
    rest = figure - minimum - sum(r.bytes for r in reasons)
    if rest:
        reasons.append(Reason("other", rest, msg("kv_agree.other", bytes=rest)))
    return KVAgreement(minimum=minimum, transformers=figure, measured=measured is not None, reasons=tuple(reasons))

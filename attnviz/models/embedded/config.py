"""The embedded default model's size and seed: what the sidebar and the CLI choose, validated once.

Defaults and ranges come from :mod:`attnviz.settings`. A :class:`EmbeddedConfig` is part of the
:class:`~attnviz.models.registry.SourceSpec` that opens the model, so it is hashable and caches key on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnviz import settings
from attnviz.core.attention import group_size
from attnviz.i18n.message import msg


@dataclass(frozen=True)
class EmbeddedConfig:
    """Size and seed of the embedded model; invalid combinations raise ValueError.

    Defaults and ranges come from :mod:`attnviz.settings`, which the sidebar and the CLI read too.
    """

    d_model: int = settings.D_MODEL.default
    n_head: int = settings.N_HEAD.default
    n_kv_head: int | None = None
    n_layer: int = settings.N_LAYER.default
    seed: int = settings.SEED.default
    causal: bool = False

    def __post_init__(self) -> None:
        settings.D_MODEL.check(self.d_model)
        if self.d_model % 2:
            raise ValueError(msg("bounds.d_model_even", d_model=self.d_model))
        settings.N_HEAD.check(self.n_head)
        if self.d_model % self.n_head:
            raise ValueError(
                msg(
                    "bounds.d_model_divisible",
                    d_model=self.d_model,
                    n_head=self.n_head,
                    rest=self.d_model % self.n_head,
                )
            )
        if self.n_kv_head is not None:
            settings.N_KV_HEAD.check(self.n_kv_head)
        group_size(self.n_head, self.kv_heads)
        settings.N_LAYER.check(self.n_layer)
        settings.SEED.check(self.seed)

    @property
    def kv_heads(self) -> int:
        """K/V heads: ``n_kv_head``, or n_head (MHA) when it is None or 0, as the sidebar and the CLI offer."""
        return self.n_kv_head or self.n_head

"""The model already in memory: :func:`capture` (the record and its statistics) and :func:`show` (attnviz's views of
it), on a transformers model object as the user holds it (any dtype, a device map, a GPU), lent to attnviz for the
call and given back as it was (:func:`attnviz.models.registry.borrowed_source`).

The capture is attnviz's bounded one (:meth:`~attnviz.models.source.AttentionSource.run`): it keeps statistics,
pooled maps and q, k per layer, never every weight, so 8,192 tokens fit where ``output_attentions=True`` would hold
n_layer · n_head · T² floats (SmolLM2: 72 GB). The price of a request is checked before it runs, as the command
line checks it (:func:`attnviz.core.budget.request_cost`): one over the budget says what fits, unless
``over_budget=True``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import pandas as pd

from attnviz import settings
from attnviz.core.capture.layer import FULL_VIEW_TOKENS
from attnviz.i18n.translate import language, set_language, t, tr
from attnviz.models.record import AttentionRecord, EncoderDecoderRecord
from attnviz.models.source import Capability
from attnviz.notebook.html import NotebookHTML, shown
from attnviz.notebook.labs.result import OverBudgetError
from attnviz.notebook.payload import Kind, view_payload


@contextmanager
def speaking(lang: str | None) -> Iterator[None]:
    """Words in ``lang`` ("en", "zh") for the block, the caller's language again after it (None: unchanged)."""
    before = language()
    if lang is not None:
        set_language(lang)
    try:
        yield
    finally:
        set_language(before)


@dataclass(frozen=True, eq=False)
class Captured:
    """What :func:`capture` returns: the ``record`` (an :class:`~attnviz.models.record.AttentionRecord`, or an
    :class:`~attnviz.models.record.EncoderDecoderRecord` for an encoder-decoder) and ``statistics``, one row per
    head as ``attnviz heads --json`` gives them (an encoder-decoder's with ``stack`` and ``kind`` columns)."""

    record: AttentionRecord | EncoderDecoderRecord
    statistics: pd.DataFrame
    details: dict = field(default_factory=dict, repr=False)  # what ran it: dtype, device, route (the view's note)

    def __repr__(self) -> str:
        first = _first(self.record)
        return f"<attnviz capture of {first.model_name}: {len(first.tokens)} tokens, {len(self.statistics)} heads>"

    def show(
        self,
        *,
        view: str = "head",
        layer: int | None = None,
        head: int | None = None,
        include_layers: Sequence[int] | None = None,
        html_action: str = "view",
        display_mode: str = "light",
        gamma: float | None = None,
        lang: str | None = None,
    ) -> NotebookHTML | None:
        """The views :func:`show` draws, of this capture: no second pass through the model (arguments as
        :func:`show`'s)."""
        with speaking(lang):
            first = _first(self.record)
            note = t("notebook.captured_note", **self.details) if self.details else ""
            if first.truncated:
                note += " " + t("notebook.truncated_note", n_tokens=len(first.tokens), n_input=first.n_input_tokens)
            kinds = _kinds(self.record, layer, head)
            if include_layers is not None:
                kinds = [Kind(k.id, k.record, tuple(include_layers), selected=k.selected) for k in kinds]
            payload = view_payload(
                kinds, view=view, title=first.model_name, note=note.strip(), theme=display_mode, gamma=gamma
            )
            return shown(payload, html_action)


PAIR_KINDS = (("encoder", "encoder", "self"), ("decoder", "decoder", "causal"), ("cross", "decoder", "cross"))


def _statistics(record: AttentionRecord | EncoderDecoderRecord) -> pd.DataFrame:
    if isinstance(record, AttentionRecord):
        return record.statistics.copy()
    frames = []
    for part, stack, kind in PAIR_KINDS:
        frame = record.part(part).statistics.copy()
        frame.insert(0, "kind", kind)
        frame.insert(0, "stack", stack)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def _check_price(source, n_tokens: int, over_budget: bool) -> None:
    from attnviz.cli.checks import over_budget_line
    from attnviz.core.budget import request_cost
    from attnviz.core.device_speed import device_of

    cost = request_cost(
        source.n_layer, source.n_head, source.n_kv_head, source.head_dim, n_tokens, device=device_of(source)
    )
    if cost.over and not over_budget:
        line = (
            over_budget_line(cost).replace("--max-tokens", "max_tokens=").replace("--over-budget", "over_budget=True")
        )
        raise OverBudgetError(line)


def _run(
    source,
    text: str,
    target: str | None,
    max_tokens: int | None,
    n_generate: int | None,
    over_budget: bool,
    keep_qk: bool | None,
):
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text is empty: give the text to read")
    limit = min(source.max_positions, settings.MAX_TOKENS.high)
    max_tokens = limit if max_tokens is None else int(max_tokens)
    if not 1 <= max_tokens <= limit:
        raise ValueError(f"max_tokens must be 1 to {limit} for {source.name}, not {max_tokens}")
    if Capability.TARGET in source.capabilities:
        if target is not None and not target.strip():
            raise ValueError("target is empty: give the decoder's text, or leave it out for the model to write one")
        generate = 0 if target is not None else (settings.TARGET_GENERATED if n_generate is None else int(n_generate))
        if not 0 <= generate <= settings.MAX_TARGET_GENERATED:
            raise ValueError(f"n_generate must be 1 to {settings.MAX_TARGET_GENERATED}, not {generate}")
        return source.run_pair(text, target or "", max_tokens, n_generate=generate)
    if target is not None or n_generate is not None:
        raise ValueError(f"target and n_generate are for encoder-decoders; {source.name} reads one text")
    n_tokens = len(source.encode(text, max_tokens).tokens)  # what the capture will read, priced before it runs
    _check_price(source, n_tokens, over_budget)
    if keep_qk is None:  # q and k let a record give any window of weights exactly: a short text's whole heads
        keep_qk = n_tokens <= FULL_VIEW_TOKENS
    return source.run(text, max_tokens, keep_qk=keep_qk)


def _captured(model, tokenizer, text, target, max_tokens, n_generate, over_budget, name, keep_qk=None) -> Captured:
    from attnviz.models.registry import borrowed_source

    with borrowed_source(model, tokenizer, name) as source:
        record = _run(source, text, target, max_tokens, n_generate, over_budget, keep_qk)
        details = {
            "dtype": str(source.dtype).removeprefix("torch."),
            "device": source.device,
            "implementation": tr(source.route_note),
            "n_tokens": len(_first(record).tokens),
        }
    return Captured(record, _statistics(record), details)


def _first(record: AttentionRecord | EncoderDecoderRecord) -> AttentionRecord:
    return record if isinstance(record, AttentionRecord) else record.encoder


def capture(
    model,
    tokenizer,
    text: str,
    *,
    target: str | None = None,
    max_tokens: int | None = None,
    n_generate: int | None = None,
    over_budget: bool = False,
    name: str | None = None,
    keep_qk: bool | None = None,
) -> Captured:
    """attnviz's bounded capture of ``text`` on ``model`` (a transformers model object) with its ``tokenizer``:
    the record and each head's statistics. ``max_tokens``: the text is cut to this many tokens (default: as many as
    the model reads, at most 8,192); an encoder-decoder's decoder reads ``target`` (teacher-forced) or, without it,
    ``n_generate`` tokens it writes itself (16 by default). ValueError (one line) for bad arguments or a request
    over the budget (``over_budget=True`` runs it anyway); the model is left as it was. ``.show()`` draws what
    :func:`show` draws from it, without running the model again. ``keep_qk``: keep each layer's q and k in the
    record, so that ``record.weights(layer, head, rows, cols)`` gives any window exactly (None: for a text of at most
    384 tokens, where a head is drawn whole; past that the statistics and pooled maps alone, as 8,192 tokens of q
    and k for SmolLM2 are a gigabyte)."""
    return _captured(model, tokenizer, text, target, max_tokens, n_generate, over_budget, name, keep_qk)


def _kinds(record: AttentionRecord | EncoderDecoderRecord, layer: int | None, head: int | None) -> list[Kind]:
    selected = None if layer is None else (int(layer), int(head or 0))
    if isinstance(record, AttentionRecord):
        return [Kind("self", record, selected=selected)]
    return [
        Kind(part, record.part(part), selected=selected if part == "encoder" else None) for part, _, _ in PAIR_KINDS
    ]


def show(
    model,
    tokenizer,
    text: str,
    *,
    target: str | None = None,
    max_tokens: int | None = None,
    n_generate: int | None = None,
    view: str = "head",
    layer: int | None = None,
    head: int | None = None,
    include_layers: Sequence[int] | None = None,
    html_action: str = "view",
    display_mode: str = "light",
    gamma: float | None = None,
    lang: str | None = None,
    over_budget: bool = False,
    name: str | None = None,
) -> NotebookHTML | None:
    """attnviz's views of ``text`` on ``model`` in memory (arguments as :func:`capture`): ``view="head"`` the
    layer x head grid with each head's statistics and flags beside one head drawn large (``layer``, ``head``),
    lines between tokens for a short text; ``view="model"`` every head as a large thumbnail. An encoder-decoder's
    encoder, decoder and cross-attention each get their own. ``html_action``, ``display_mode``: as BertViz's;
    ``gamma``: the colour scale (1.0 by weight, 0.5 by √weight; None: √ past 128 tokens); ``lang``: "en" or "zh"."""
    with speaking(lang):
        captured = _captured(model, tokenizer, text, target, max_tokens, n_generate, over_budget, name)
    return captured.show(
        view=view,
        layer=layer,
        head=head,
        include_layers=include_layers,
        html_action=html_action,
        display_mode=display_mode,
        gamma=gamma,
        lang=lang,
    )

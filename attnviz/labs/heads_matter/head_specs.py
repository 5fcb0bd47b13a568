"""Heads as a user names them: ``"L.H,L.H"`` (``L.*``: every head of layer L), read and checked against a model's
shape, with one-line messages that quote what was typed (shortened when long)."""

from __future__ import annotations

from collections.abc import Sequence

from attnviz.core.typed_numbers import ascii_digits
from attnviz.i18n.message import msg

Head = tuple[int, int]  # (layer, head)
HEAD_SPEC_DIGITS = 6  # a layer or head number longer than this is refused before int() reads it
SHOWN_SPEC_CHARS = 24  # what a message quotes of a malformed spec


def shown_spec(text: str, limit: int = SHOWN_SPEC_CHARS) -> str:
    """``text`` for a one-line message: as typed, or its first ``limit`` characters, "…" and its length."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def _head_number(text: str, item: str) -> int | None:
    """A layer or head number as typed, or None when it is not ASCII digits. ValueError for one with a leading zero
    ("0.01" is not head 1) or more than HEAD_SPEC_DIGITS digits (int() of 5,000 raises Python's own message)."""
    if not ascii_digits(text):
        return None
    if len(text) > HEAD_SPEC_DIGITS:
        raise ValueError(msg("ablation_lib.head_too_long", item=shown_spec(item), digits=HEAD_SPEC_DIGITS))
    if len(text) > 1 and text.startswith("0"):
        raise ValueError(msg("ablation_lib.leading_zero", item=shown_spec(item)))
    return int(text)


def read_heads(spec: str) -> list[tuple[int, int | None]]:
    """The syntax of ``"L.H,L.H"`` (``L.*``: every head of layer L, head None), before any model is known.

    ValueError naming the first item that is not LAYER.HEAD or LAYER.* (shortened past SHOWN_SPEC_CHARS)."""
    items = [item.strip() for item in spec.split(",")]
    if not spec.strip():
        raise ValueError(msg("ablation_lib.no_heads", spec=shown_spec(spec)))
    read = []
    for item in items:
        if not item:  # "0.1," or "0.1,,1.2": name what was typed, not the empty piece
            raise ValueError(msg("ablation_lib.bad_head", item=shown_spec(spec)))
        layer_text, dot, head_text = item.partition(".")
        layer = _head_number(layer_text, item)
        head = None if head_text == "*" else _head_number(head_text, item)
        if not dot or layer is None or (head is None and head_text != "*"):
            raise ValueError(msg("ablation_lib.bad_head", item=shown_spec(item)))
        read.append((layer, head))
    return read


def parse_heads(spec: str, n_layer: int, n_head: int) -> list[Head]:
    """``"L.H,L.H"`` (``L.*``: every head of layer L) -> [(layer, head), …], in order, without repeats.

    ValueError naming the item for one that is malformed or names a head the model does not have."""
    heads: list[Head] = []
    for layer, head in read_heads(spec):
        item = f"{layer}.{'*' if head is None else head}"
        if not 0 <= layer < n_layer or (head is not None and not 0 <= head < n_head):
            raise ValueError(msg("ablation_lib.head_range", item=item, last_layer=n_layer - 1, last_head=n_head - 1))
        for at in range(n_head) if head is None else [head]:
            if (layer, at) not in heads:
                heads.append((layer, at))
    return heads


def check_heads(heads: Sequence[Head], n_layer: int, n_head: int) -> list[Head]:
    """The heads as (layer, head) tuples; ValueError for one the model does not have."""
    checked = []
    for layer, head in heads:
        if not (0 <= layer < n_layer and 0 <= head < n_head):
            raise ValueError(
                msg("ablation_lib.head_range", item=f"{layer}.{head}", last_layer=n_layer - 1, last_head=n_head - 1)
            )
        checked.append((int(layer), int(head)))
    return checked

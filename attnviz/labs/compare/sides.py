"""What record B may be beside A: another text, another model that reads the text into the same tokens, or the
same weights under another mask, and why not when it cannot be.
"""

from __future__ import annotations

from dataclasses import replace

from attnviz.i18n.message import Message, msg
from attnviz.models.registry import SourceSpec
from attnviz.models.source import Encoding

MODES = ("texts", "models", "masks")


def same_tokens(a: Encoding, b: Encoding) -> bool:
    """Whether two sources read a text into the same tokens: the same ids where both have a vocabulary, none where
    only one has; and the same tokens, each its display text, the model's own string and whether it is special
    (SmolLM2's "Ġcat" is not the embedded model's "cat", though both show "cat")."""
    if (a.ids is None) != (b.ids is None) or (a.ids is not None and list(a.ids) != list(b.ids)):
        return False
    return [(t.text, t.raw, t.special) for t in a.tokens] == [(t.text, t.raw, t.special) for t in b.tokens]


def tokens_differ(name_a: str, name_b: str, a: Encoding, b: Encoding) -> Message:
    """Why two models cannot be compared on a text: where their tokens first part, each as the model reads it
    (its own string where it has one)."""
    texts_a, texts_b = [t.raw or t.text for t in a.tokens], [t.raw or t.text for t in b.tokens]
    pairs = zip(a.tokens, b.tokens, strict=False)
    at = next(
        (i for i, (x, y) in enumerate(pairs) if (x.text, x.raw, x.special) != (y.text, y.raw, y.special)),
        min(len(a.tokens), len(b.tokens)),
    )
    return msg(
        "compare_lib.tokens_differ",
        a=name_a,
        b=name_b,
        n_a=len(texts_a),
        n_b=len(texts_b),
        at=at,
        token_a=texts_a[at] if at < len(texts_a) else "",
        token_b=texts_b[at] if at < len(texts_b) else "",
    )


def mask_variant(spec: SourceSpec, causal: bool) -> SourceSpec | None:
    """``spec`` with the same weights under the causal (``causal``) or bidirectional mask, where the mask is a
    setting of the model (the embedded model's, under one seed); None where the source only runs under its own
    mask, which no capture can change."""
    if spec.config is None:
        return None
    return replace(spec, config=replace(spec.config, causal=causal))


def mask_name(causal: bool) -> str:
    return "causal" if causal else "bidirectional"

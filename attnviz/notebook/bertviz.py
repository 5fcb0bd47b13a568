"""BertViz's two calls, attnviz's views: ``from attnviz.notebook import head_view, model_view`` in place of
``from bertviz import head_view, model_view``, with the same arguments.

BertViz's ``head_view(attention, tokens, sentence_b_start=None, prettify_tokens=True, layer=None, heads=None,
encoder_attention=None, decoder_attention=None, cross_attention=None, encoder_tokens=None, decoder_tokens=None,
include_layers=None, html_action="view")`` and ``model_view(..., include_heads=None, display_mode="dark")``
(bertviz 1.4) take a model's ``outputs.attentions``: a tuple of one (1, heads, queries, keys) tensor per layer, for
a decoder or an encoder, or the three of an encoder-decoder. What each argument does here:

- ``attention`` / ``tokens``: one kind of attention over its tokens (a causal one read as such from its weights);
- ``encoder_attention``, ``decoder_attention``, ``cross_attention`` with ``encoder_tokens`` / ``decoder_tokens``:
  up to three kinds, chosen by buttons above the view (cross-attention: the decoder's tokens over the encoder's);
- ``sentence_b_start``: the index of sentence B's first token: a selector draws all, A → A, B → B, A → B, B → A;
- ``prettify_tokens``: BertViz's cleaning of subword marks (``Ġ`` and ``▁`` as a space, ``</w>`` dropped);
- ``layer`` / ``heads``: the layer and head drawn large first (the first of ``heads``); ``heads`` (head_view) and
  ``include_heads`` (model_view) also dim the grid's other heads;
- ``include_layers``: the layers the grid draws (every one when None);
- ``html_action``: "view" shows the view in the notebook, "return" gives it as an object with ``.data`` (its HTML)
  and ``_repr_html_``, standing alone;
- ``display_mode``: "light" or "dark" (BertViz's model_view is dark by default, its head_view light).

One argument of attnviz's own comes after BertViz's: ``gamma``, the colour scale (1.0: by weight, 0.5: by
√weight; by default √ past 128 tokens, as the Heads page), which the view's "√ weight" switch changes too.
"""

from __future__ import annotations

from collections.abc import Sequence

from attnviz.core.token_display import SPACE_MARKERS
from attnviz.i18n.translate import t
from attnviz.models.given import GivenWeightsError, given_record, layer_weights
from attnviz.models.record import AttentionRecord
from attnviz.notebook.html import NotebookHTML, shown
from attnviz.notebook.payload import Kind, view_payload


def prettified(tokens: Sequence[str]) -> list[str]:
    """BertViz's ``format_special_chars``: byte-level BPE's ``Ġ`` and SentencePiece's ``▁`` as a space, ``</w>``
    dropped."""
    cleaned = [str(tok).replace("</w>", "") for tok in tokens]
    for marker in SPACE_MARKERS:
        cleaned = [tok.replace(marker, " ") for tok in cleaned]
    return cleaned


def _tokens(tokens: object, name: str, prettify: bool) -> list[str]:
    if tokens is None or isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise GivenWeightsError(f"{name} must be a list of token strings, one per position")
    return prettified(tokens) if prettify else [str(tok) for tok in tokens]


def _records(
    attention, tokens, encoder_attention, decoder_attention, cross_attention, encoder_tokens, decoder_tokens, prettify
) -> list[tuple[str, AttentionRecord]]:
    """The kinds a call hands over, each as a record (GivenWeightsError, one line, for what does not fit)."""
    if attention is not None:
        if any(a is not None for a in (encoder_attention, decoder_attention, cross_attention)):
            raise GivenWeightsError(
                "pass either attention (one model's) or encoder_/decoder_/cross_attention (an encoder-decoder's)"
            )
        words = _tokens(tokens, "tokens", prettify)
        return [("self", given_record(layer_weights(attention, "attention", len(words), len(words)), words))]
    if encoder_attention is None and decoder_attention is None and cross_attention is None:
        raise GivenWeightsError("no attention given: pass attention=outputs.attentions (and tokens)")
    found = []
    source = _tokens(encoder_tokens, "encoder_tokens", prettify) if encoder_tokens is not None else None
    target = _tokens(decoder_tokens, "decoder_tokens", prettify) if decoder_tokens is not None else None
    for kind, weights, queries, keys in (
        ("encoder", encoder_attention, source, source),
        ("decoder", decoder_attention, target, target),
        ("cross", cross_attention, target, source),
    ):
        if weights is None:
            continue
        if queries is None or keys is None:
            need = "encoder_tokens" if queries is source and source is None else "decoder_tokens"
            need = "encoder_tokens and decoder_tokens" if kind == "cross" else need
            raise GivenWeightsError(f"{kind}_attention needs {need}")
        layers = layer_weights(weights, f"{kind}_attention", len(queries), len(keys))
        cross = kind == "cross"
        record = given_record(
            layers,
            queries,
            key_tokens=keys if cross else None,
            kind="cross" if cross else "self",
            stack="encoder" if kind == "encoder" else "decoder",
        )
        found.append((kind, record))
    return found


def _view(
    view: str,
    attention,
    tokens,
    sentence_b_start,
    prettify_tokens,
    layer,
    heads,
    encoder_attention,
    decoder_attention,
    cross_attention,
    encoder_tokens,
    decoder_tokens,
    include_layers,
    html_action,
    display_mode,
    gamma,
) -> NotebookHTML | None:
    records = _records(
        attention,
        tokens,
        encoder_attention,
        decoder_attention,
        cross_attention,
        encoder_tokens,
        decoder_tokens,
        prettify_tokens,
    )
    kinds = []
    for kind, record in records:
        layers = None if include_layers is None else tuple(int(i) for i in include_layers)
        drawn = layers if layers is not None else tuple(range(record.n_layer))
        if not drawn or any(not 0 <= i < record.n_layer for i in drawn):
            raise GivenWeightsError(f"include_layers must be among 0..{record.n_layer - 1}, got {list(drawn)}")
        first_layer = drawn[0] if layer is None else int(layer)
        if first_layer not in drawn:
            raise GivenWeightsError(f"layer {first_layer} is not among the layers drawn {list(drawn)}")
        chosen = None if heads is None else tuple(int(h) for h in heads)
        if chosen is not None and (not chosen or any(not 0 <= h < record.n_head for h in chosen)):
            raise GivenWeightsError(f"heads must be among 0..{record.n_head - 1}, got {list(chosen)}")
        sentence_b = None
        if sentence_b_start is not None and kind in ("self", "encoder"):
            sentence_b = int(sentence_b_start)
            if not 0 < sentence_b < record.q_len:
                raise GivenWeightsError(f"sentence_b_start must be within 1..{record.q_len - 1}, got {sentence_b}")
        kinds.append(
            Kind(
                kind,
                record,
                layers=layers,
                shown_heads=chosen,
                selected=(first_layer, chosen[0] if chosen else 0),
                sentence_b=sentence_b,
            )
        )
    first = kinds[0].record
    mask = t("notebook.given_causal") if first.causal else t("notebook.given_full")
    note = t("notebook.given_note", n_layer=first.n_layer, n_head=first.n_head, n_tokens=first.q_len, mask=mask)
    payload = view_payload(
        kinds, view=view, title=t("notebook.given_title"), note=note, theme=display_mode, gamma=gamma
    )
    return shown(payload, html_action)


def head_view(
    attention=None,
    tokens=None,
    sentence_b_start=None,
    prettify_tokens=True,
    layer=None,
    heads=None,
    encoder_attention=None,
    decoder_attention=None,
    cross_attention=None,
    encoder_tokens=None,
    decoder_tokens=None,
    include_layers=None,
    html_action="view",
    display_mode="light",
    gamma=None,
):
    """BertViz's ``head_view``: the layer x head grid with each head's statistics and flags, one head large (a click
    on the grid opens another), lines between tokens for a short text, each kind of an encoder-decoder. Arguments as
    BertViz's (the module's docstring says what each does here). ``html_action="return"``: a :class:`NotebookHTML`."""
    return _view(
        "head",
        attention,
        tokens,
        sentence_b_start,
        prettify_tokens,
        layer,
        heads,
        encoder_attention,
        decoder_attention,
        cross_attention,
        encoder_tokens,
        decoder_tokens,
        include_layers,
        html_action,
        display_mode,
        gamma,
    )


def model_view(
    attention=None,
    tokens=None,
    sentence_b_start=None,
    prettify_tokens=True,
    display_mode="dark",
    encoder_attention=None,
    decoder_attention=None,
    cross_attention=None,
    encoder_tokens=None,
    decoder_tokens=None,
    include_layers=None,
    include_heads=None,
    html_action="view",
    gamma=None,
):
    """BertViz's ``model_view``: every layer x head at once, as large thumbnails, a click drawing that head large
    below. Arguments as BertViz's (``include_heads``: the heads drawn at full strength, the others dimmed)."""
    return _view(
        "model",
        attention,
        tokens,
        sentence_b_start,
        prettify_tokens,
        None,
        include_heads,
        encoder_attention,
        decoder_attention,
        cross_attention,
        encoder_tokens,
        decoder_tokens,
        include_layers,
        html_action,
        display_mode,
        gamma,
    )

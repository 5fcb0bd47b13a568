"""Tokens as a person reads them, not as a tokenizer stores them.

WordPiece's ``##``, byte-level BPE's ``Ġ`` and SentencePiece's ``▁`` are
dropped in favour of the source text, a piece that continues a word is marked
``·``, and the byte pieces of one multi-byte character are numbered
(``猫(1/3)``), so Chinese typed into a byte-level model reads right.
"""

from __future__ import annotations

import html
import unicodedata

from attnviz.tokenizer import Token


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() and not unicodedata.name(ch, "").startswith(("CJK", "HIRAGANA", "KATAKANA"))


def shown_text(piece: str) -> str:
    """A token's text without surrounding spaces; whitespace-only pieces as ␣ or ⏎."""
    return piece.strip() or ("⏎" if "\n" in piece else "␣")


def display_tokens(
    text: str, ids: list[int], offsets: list[tuple[int, int]] | None, tokenizer, special: list[int]
) -> list[Token]:
    """Readable tokens: source text instead of "Ġ"/"▁"/"##" markers, CJK shown right.

    - a piece that continues a word gets a leading "·" ("un", "·believ", "·able");
    - several byte-level pieces of one character show it with their index ("猫(1/3)");
    - whitespace shows as "␣" or "⏎"; an unknown token shows its source text + "[UNK]";
    - special tokens keep their own string and are marked.
    """
    raws = tokenizer.convert_ids_to_tokens(ids)
    unk = tokenizer.unk_token_id
    tokens: list[Token] = []
    spans = offsets or [(0, 0)] * len(ids)
    sharing: dict[int, list[int]] = {}  # span end -> the non-special tokens ending there
    for j, (start, end) in enumerate(spans):
        if not special[j] and start < end:
            sharing.setdefault(end, []).append(j)
    for i, (tid, raw, (start, end)) in enumerate(zip(ids, raws, spans, strict=True)):
        if special[i]:
            tokens.append(Token(raw, start, start, special=True, raw=raw))
            continue
        if offsets is None:
            tokens.append(Token(tokenizer.convert_tokens_to_string([raw]).strip() or raw, 0, 0, raw=raw))
            continue
        piece = text[start:end]
        shown = shown_text(piece)
        # pieces of one multi-byte character share its span: number them
        group = sharing.get(end, [])
        if len(group) > 1 and len(piece.strip()) == 1:
            shown = f"{shown}({group.index(i) + 1}/{len(group)})"
        elif (
            tokens
            and not tokens[-1].special
            and start == tokens[-1].end
            and start > 0
            and _is_word_char(text[start - 1])
            and _is_word_char(text[start])
        ):
            shown = "·" + shown
        unknown = unk is not None and tid == unk
        if unknown:
            shown += "[UNK]"
        tokens.append(Token(shown, start, end, raw=raw, unknown=unknown))
    return tokens


MARKDOWN_SPECIAL = "\\`*_{}[]()#+-.!|<>~$"


def markdown_text(text: str) -> str:
    """User text (a token, a folder name, a prompt) made safe inside Markdown: every markup character escaped."""
    return "".join(f"\\{ch}" if ch in MARKDOWN_SPECIAL else ch for ch in text)


def plain_text(text: str) -> str:
    """User text made safe for a Plotly title, which would read ``<b>`` or ``<br>`` as markup."""
    return html.escape(text, quote=False)


HOVER_LINE_CHARS = 60  # user text in a hover box is wrapped at this many characters a line
HOVER_LINES = 10  # and shown on at most this many lines: Plotly drops a hover box taller than the plot


def hover_text(text: str, width: int = HOVER_LINE_CHARS, lines: int = HOVER_LINES) -> str:
    """User text for a Plotly hover box (a category or a constant in a hovertemplate).

    Markup is escaped, and so is ``%`` (``%{z}`` typed by a user is not a template
    variable); the text is wrapped every ``width`` characters, and past ``lines``
    lines the rest is counted, not shown.
    """
    shown = [
        plain_text(text[i : i + width]).replace("%", "&#37;") for i in range(0, min(len(text), width * lines), width)
    ]
    if len(text) > width * lines:
        shown.append(f"… {len(text) - width * lines:,} more characters")
    return "<br>".join(shown)

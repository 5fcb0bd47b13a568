"""Tokens as a person reads them, not as a tokenizer stores them.

WordPiece's ``##``, byte-level BPE's ``Ġ`` and SentencePiece's ``▁`` are
dropped in favour of the source text, a piece that continues a word is marked
``·``, and the byte pieces of one multi-byte character are numbered
(``猫(1/3)``), so Chinese typed into a byte-level model reads right.
"""

from __future__ import annotations

import html
import unicodedata
from dataclasses import replace

import regex

from attnviz.core.tokenizer import Token


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() and not unicodedata.name(ch, "").startswith(("CJK", "HIRAGANA", "KATAKANA"))


# the spaces a token's text is stripped of, and shown as ␣ or ⏎ when that is all it holds: ordinary spacing
# (category Zs) and tab/newline/return. Every other control character is made visible instead.
SPACES = " \t\n\r\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000"
# characters that draw nothing, or reorder or join what is around them: control (Cc), format (Cf: bidi
# overrides, zero-width space/joiners, BOM, tags), line/paragraph separators, surrogates, private use, and
# a few letters and marks that render as blanks (Hangul fillers, the combining grapheme joiner, variation selectors)
_INVISIBLE_CATEGORIES = {"Cc", "Cf", "Zl", "Zp", "Cs", "Co"}
_BLANK_CHARS = {0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x3164, 0xFFA0, 0x2800}
_EMOJI = regex.compile(r"[\p{Extended_Pictographic}\p{Regional_Indicator}]")
# inside an emoji these build the picture (👨‍👩‍👧, ❤️, 🏴 subdivision flags): kept as they are there
_EMOJI_GLUE = {0x200D, *range(0xFE00, 0xFE10), *range(0xE0020, 0xE0080)}


def _invisible(ch: str) -> bool:
    code = ord(ch)
    return (
        unicodedata.category(ch) in _INVISIBLE_CATEGORIES
        or code in _BLANK_CHARS
        or 0xFE00 <= code <= 0xFE0F
        or 0xE0100 <= code <= 0xE01EF
    )


def visible_text(text: str) -> str:
    """``text`` with every invisible or reordering character written as its code point: ``⟨U+202E⟩``.

    A bidi override would otherwise turn ``\u202e(1/2)`` into "(2/1)" on screen, and a zero-width space
    or BOM would be a token with no label. Ordinary spaces are left to :func:`shown_text`; inside an
    emoji the joiners and variation selectors that build it are kept.
    """
    glue_ok = _EMOJI.search(text) is not None
    shown = []
    for ch in text:
        if ch in SPACES or not _invisible(ch) or (glue_ok and ord(ch) in _EMOJI_GLUE):
            shown.append(ch)
        else:
            shown.append(f"⟨U+{ord(ch):04X}⟩")
    return "".join(shown)


def shown_text(piece: str) -> str:
    """A token's text without surrounding spaces, invisible characters made visible (:func:`visible_text`);
    whitespace-only pieces as ␣ or ⏎."""
    return visible_text(piece.strip(SPACES)) or ("⏎" if "\n" in piece else "␣")


def display_tokens(
    text: str, ids: list[int], offsets: list[tuple[int, int]] | None, tokenizer, special: list[int]
) -> list[Token]:
    """Readable tokens: source text instead of "Ġ"/"▁"/"##" markers, CJK shown right.

    - a piece that continues a word gets a leading "·" ("un", "·believ", "·able");
    - several byte-level pieces of one character show it with their index ("猫(1/3)");
    - whitespace shows as "␣" or "⏎"; an unknown token shows its source text + "[UNK]";
    - invisible characters (bidi controls, zero-width spaces, BOM, control characters) show as "⟨U+202E⟩";
    - special tokens keep their own string and are marked;
    - a special token's string typed into the text ("[UNK]", "<|endoftext|>") shows once, as typed, and is
      marked ``typed_special``: the text is data, even when the tokenizer reads it as that special token.
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
            tokens.append(
                Token(visible_text(tokenizer.convert_tokens_to_string([raw]).strip(SPACES)) or raw, 0, 0, raw=raw)
            )
            continue
        piece = text[start:end]
        shown = shown_text(piece)
        # pieces of one multi-byte character share its span: number them
        group = sharing.get(end, [])
        if len(group) > 1 and len(piece.strip(SPACES)) == 1:
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
        typed = piece.strip(SPACES) == raw and tid in getattr(tokenizer, "all_special_ids", ())
        unknown = unk is not None and tid == unk and not typed
        if unknown:
            shown += "[UNK]"
        tokens.append(Token(shown, start, end, raw=raw, unknown=unknown, typed_special=typed))
    return tokens


def _decoded(tokenizer, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def generated_tokens(tokenizer, ids: list[int], special_ids) -> list[Token]:
    """Display tokens for ids a model generated (no source text): the same readable labels as a prompt's.

    Each id's span in the decoded text comes from decoding the growing prefix: a byte piece that leaves a
    character unfinished ("\ufffd") shares the span of the character it helps finish, so the pieces of 它
    read "它(1/2)", "它(2/2)" as in the prompt, not "�". Spans are -1: they are not in the user's text.
    """
    text = _decoded(tokenizer, ids)
    settled: list[int] = []  # characters of ``text`` final after each id
    complete: list[bool] = []  # whether the prefix up to this id decodes to a prefix of ``text``
    for k in range(len(ids)):
        part = _decoded(tokenizer, ids[: k + 1])
        n = 0
        while n < min(len(part), len(text)) and part[n] == text[n]:
            n += 1
        settled.append(n)
        complete.append(n == len(part))
    offsets = []
    for k in range(len(ids)):
        start = settled[k - 1] if k else 0
        end = next((settled[j] for j in range(k, len(ids)) if complete[j]), len(text))
        offsets.append((min(start, end), end))
    special = [int(i in special_ids) for i in ids]
    return [replace(token, start=-1, end=-1) for token in display_tokens(text, ids, offsets, tokenizer, special)]


# ":" too: Streamlit reads ":smile:" as an emoji, ":red[x]" as colour and ":material/home:" as an icon
MARKDOWN_SPECIAL = "\\`*_{}[]()#+-.!|<>~$:"


def typed_special(tokens: list[Token]) -> list[str]:
    """The special tokens' strings the user typed into the text ("[UNK]", "<|endoftext|>"), each once, in order."""
    return list(dict.fromkeys(token.raw for token in tokens if token.typed_special))


def markdown_tokens(tokens: list[Token], limit: int, separator: str = " · ") -> str:
    """Tokens for a Markdown line (the Overview's caption): each escaped, the first ``limit``, then "…"."""
    shown = separator.join(markdown_text(token.text) for token in tokens[:limit])
    return shown + (" …" if len(tokens) > limit else "")


def markdown_text(text: str) -> str:
    """User text (a token, a folder name, a prompt) made safe inside Markdown: every markup character escaped."""
    return "".join(f"\\{ch}" if ch in MARKDOWN_SPECIAL else ch for ch in text)


def plain_text(text: str) -> str:
    """User text made safe for a Plotly title, which would read ``<b>`` or ``<br>`` as markup."""
    return html.escape(text, quote=False)


SPACE_MARKERS = ("Ġ", "▁")  # byte-level BPE's and SentencePiece's mark of a token that starts with a space


def read_texts(text: str, tokens: list[Token]) -> list[str]:
    """Each token's own text as the model read it from ``text``, leading space included (" Mary" where the display
    text shows "Mary"), what the command line prints: the text its span covers, with the space before it where the
    tokenizer's token starts with one; a special token its own string. A byte piece of a multi-byte character (its
    span shared with other pieces) and a token without a span keep their display text ("猫(1/3)")."""
    ends: dict[int, int] = {}
    for token in tokens:
        if not token.special and token.start < token.end:
            ends[token.end] = ends.get(token.end, 0) + 1
    read = []
    for token in tokens:
        if token.special:
            read.append(token.raw or token.text)
            continue
        if token.start >= token.end or ends.get(token.end, 0) > 1:
            read.append(token.text)
            continue
        piece = text[token.start : token.end]
        spaced = token.raw.startswith(SPACE_MARKERS) and not piece[:1].isspace()
        if spaced and token.start > 0 and text[token.start - 1].isspace():
            piece = text[token.start - 1] + piece
        read.append(piece)
    return read

"""A tokenizer for any Unicode text that remembers where each token came from.

The embedded default model has no vocabulary file, so it needs a tokenizer that
works on whatever a person types and never loses a character:

- English (and any alphabetic script) splits into words, with internal
  apostrophes kept ("don't"), and one token per punctuation mark;
- Chinese, Japanese kana and other ideographs give one token per character;
- an emoji is one token even when it is several code points (skin tones, ZWJ
  families, flags), because it is matched as a grapheme cluster.

Each token carries its (start, end) span in the original string, so
``text[start:end] == token.text`` always holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import regex

_IDEOGRAPHIC = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Bopomofo}"
_TOKEN = regex.compile(
    rf"""(?V1)
    (?=[\p{{Extended_Pictographic}}\p{{Regional_Indicator}}])\X      # one emoji, however many code points
    | [{_IDEOGRAPHIC}]                                               # one ideograph
    | [[\p{{L}}\p{{M}}\p{{N}}_]--[{_IDEOGRAPHIC}]]+
      (?:['’][[\p{{L}}\p{{M}}\p{{N}}]--[{_IDEOGRAPHIC}]]+)*            # a word, "don't" kept whole
    | (?!\s)\X                                                       # any other visible grapheme
    """,
    regex.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    """One token: its display text and (start, end) span in the source text.

    ``special`` marks tokens the model adds ([CLS], <|im_start|>, pads), which
    have an empty span; ``pad`` marks padding; ``raw`` is the model's own token
    string ("##ing", "Ġcat") where it differs from the display text; ``unknown``
    marks the tokenizer's unknown token ([UNK]): the model did not read that text; ``typed_special``
    marks a special token's string typed into the text ("[UNK]", "<|endoftext|>"), which the tokenizer
    read as that special token.
    """

    text: str
    start: int
    end: int
    special: bool = False
    pad: bool = False
    raw: str = ""
    unknown: bool = False
    typed_special: bool = False


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens with spans; empty or whitespace-only text gives []."""
    return [Token(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(text)]

"""A corrupted text proposed from a clean one, so that patching opens on two texts that differ where it matters.

Activation patching compares a clean text with a corrupted one of the same token length. A reader arrives with
one text; this proposes the other by the swaps patching is known for: two different names (the indirect-object
prompt's repeated name becomes the other one, or the two are exchanged; a single name becomes another of as
many tokens), a number (the greater-than prompt's year ends in 01), or a known subject (cat → dog, Paris →
Rome). Every candidate is kept only when the model's tokenizer reads it as many tokens as the clean text and the
read tokens differ. A text that offers none opens on the built-in example pair, which says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

from attnviz.core.admission import Need
from attnviz.i18n.message import Message, msg
from attnviz.models.source import AttentionSource

EXAMPLE_CLEAN = "When Mary and John went to the store, John gave a drink to"
EXAMPLE_CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
# Common given names, each one token with its leading space in the usual BPE vocabularies.
NAMES = (
    "Mary", "John", "Alice", "Bob", "Tom", "Anna", "James", "Sarah", "David", "Emma", "Paul", "Lisa", "Mark",
    "Kate", "Peter", "Susan", "Michael", "Jane", "Jack", "Emily",
)  # fmt: skip
# Subjects a factual or agreement prompt turns on, each with its swap (both ways).
SUBJECT_PAIRS = (
    ("cat", "dog"), ("man", "woman"), ("boy", "girl"), ("king", "queen"), ("brother", "sister"),
    ("father", "mother"), ("Paris", "Rome"), ("France", "Italy"), ("London", "Berlin"), ("Germany", "Spain"),
    ("trophy", "ball"), ("猫", "狗"), ("北京", "上海"),
)  # fmt: skip
SUBJECTS = {**dict(SUBJECT_PAIRS), **{b: a for a, b in SUBJECT_PAIRS}}
_WORD = re.compile(r"\b[A-Za-z]+\b")
_NUMBER = re.compile(r"(?<![\d.])\d+(?![\d.])")
KINDS = ("repeated_name", "swapped_names", "other_name", "number", "subject", "example")
# a proposal's price: the tokenizer reads the whole text at each try (measured on 2 loaded cores, SmolLM2's, MiniLM's
# and the embedded model's tokenizers, 60 to 172,000 characters, English and Chinese)
ENCODE_SECONDS_PER_BYTE = 1.5e-6  # a UTF-8 byte of text read (0.7 to 1.2 µs measured)
ENCODE_CALL_SECONDS = 2e-4  # a call, whatever its length (0.05 to 0.17 ms measured on 60 characters)
ENCODE_BYTES_PER_BYTE = 160  # a proposal's peak above the process a UTF-8 byte (57 measured: English, 143: Chinese)
# a swap: its kind, the old and new words, and the corrupted text, built only when it is tried
Swap = tuple[str, str, str, Callable[[], str]]


@dataclass(frozen=True)
class Proposal:
    """Two texts to patch: ``clean`` and ``corrupt``, what was changed (``kind``, one of :data:`KINDS`, and the
    ``old`` and ``new`` words). ``kind == "example"``: the reader's text offered no swap, this is the built-in
    pair."""

    clean: str
    corrupt: str
    kind: str
    old: str
    new: str

    @property
    def message(self) -> Message:
        """What it changed, in words (``patch_proposal.<kind>``)."""
        return msg(f"patch_proposal.{self.kind}", old=self.old, new=self.new, clean=self.clean, corrupt=self.corrupt)

    @property
    def swapped(self) -> tuple[str, str]:
        """The words that changed, old and new."""
        return self.old, self.new


def _replace_at(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


def _cased(word: str, like: str) -> str:
    """``word`` with ``like``'s first letter's case (The cat → The dog, Cat → Dog)."""
    if like[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


def _name_swaps(text: str) -> Iterator[Swap]:
    """A repeated name's last use become the other name; the first two names exchanged; a single name become
    another."""
    found = [m for m in _WORD.finditer(text) if m.group() in NAMES]
    names = list(dict.fromkeys(m.group() for m in found))
    if len(names) >= 2:
        for name in names:
            uses = [m for m in found if m.group() == name]
            if len(uses) >= 2:
                other = next(n for n in names if n != name)
                yield "repeated_name", name, other, partial(_replace_at, text, uses[-1].start(), uses[-1].end(), other)
        a, b = names[:2]
        yield "swapped_names", a, b, partial(_WORD.sub, lambda m: {a: b, b: a}.get(m.group(), m.group()), text)
    elif len(names) == 1:
        (name,) = names
        for other in NAMES:
            if other != name:
                yield "other_name", name, other, partial(re.sub, rf"\b{name}\b", other, text)


def _number_swaps(text: str) -> Iterator[Swap]:
    """A number with its last two digits 01 (the greater-than prompt's corruption), or its last digit changed."""
    for m in _NUMBER.finditer(text):
        number = m.group()
        tried = [number[:-2] + "01"] if len(number) >= 2 else []
        tried += [number[:-1] + str((int(number[-1]) + step) % 10) for step in (5, 1)]
        for new in dict.fromkeys(tried):
            if new != number:
                yield "number", number, new, partial(_replace_at, text, m.start(), m.end(), new)


def _subject_swaps(text: str) -> Iterator[Swap]:
    """Each known subject (a word, or a CJK one found anywhere) in the order it appears, swapped everywhere."""
    seen = []
    for m in _WORD.finditer(text):
        key = m.group() if m.group() in SUBJECTS else m.group().lower()
        if key in SUBJECTS and key not in seen:
            seen.append(key)
    seen += [word for word in SUBJECTS if not word.isascii() and word in text and word not in seen]
    for word in seen:
        new = SUBJECTS[word]
        if word.isascii():
            cased = partial(re.sub, rf"\b{word}\b", lambda m, n=new: _cased(n, m.group()), text, flags=re.IGNORECASE)
            yield "subject", word, new, cased
        else:
            yield "subject", word, new, partial(text.replace, word, new)


SWAPS = (_name_swaps, _number_swaps, _subject_swaps)  # in the order they are tried


def _fits(source: AttentionSource, clean_tokens: list[str], clean_ids, corrupt: str, max_tokens: int) -> bool:
    """Whether ``corrupt`` reads as many tokens as the clean text and not the same ones."""
    encoding = source.encode(corrupt, max_tokens)
    if len(encoding.tokens) != len(clean_tokens):
        return False
    if encoding.ids is not None and clean_ids is not None:
        return list(encoding.ids) != list(clean_ids)
    return [t.text for t in encoding.tokens] != clean_tokens


def propose_swap(source: AttentionSource, text: str, max_tokens: int) -> Proposal | None:
    """The first natural swap of ``text`` (names, then a number, then a subject) that keeps its token length
    under ``source``'s tokenizer (within ``max_tokens``) and changes what is read; None when it offers none."""
    clean = source.encode(text, max_tokens)
    if not clean.tokens:
        return None
    clean_tokens = [t.text for t in clean.tokens]
    for swaps in SWAPS:
        for kind, old, new, build in swaps(text):
            corrupt = build()
            if corrupt != text and _fits(source, clean_tokens, clean.ids, corrupt, max_tokens):
                return Proposal(text, corrupt, kind, old, new)
    return None


def example_pair(source: AttentionSource, max_tokens: int) -> Proposal:
    """The built-in pair (the indirect-object prompt, its repeated name swapped), marked ``example``; for a
    tokenizer that reads the two names at other lengths, the example's own first swap that fits."""
    found = propose_swap(source, EXAMPLE_CLEAN, max_tokens)
    corrupt, old, new = (found.corrupt, found.old, found.new) if found else (EXAMPLE_CORRUPT, "John", "Mary")
    return Proposal(EXAMPLE_CLEAN, corrupt, "example", old, new)


def swap_count(text: str) -> int:
    """How many swaps of ``text`` :func:`propose_swap` may try (none of them built)."""
    return sum(1 for swaps in SWAPS for _ in swaps(text))


def propose_need(text: str) -> Need:
    """What :func:`propose` of ``text`` costs at most, on the host (a tokenizer's work): the text's reading and a
    corrupted copy's at once (:data:`ENCODE_BYTES_PER_BYTE` a UTF-8 byte), and every read it may make: the text,
    each of its swaps (:func:`swap_count`; a swap that fits ends it sooner) and the example pair's, each at
    :data:`ENCODE_SECONDS_PER_BYTE` a byte and :data:`ENCODE_CALL_SECONDS` a call."""
    size, example = len(text.encode("utf-8")), len(EXAMPLE_CLEAN.encode("utf-8"))
    reads = [size] * (1 + swap_count(text)) + [example] * (1 + swap_count(EXAMPLE_CLEAN))
    seconds = sum(ENCODE_CALL_SECONDS + n * ENCODE_SECONDS_PER_BYTE for n in reads)
    return Need(max(size, example) * ENCODE_BYTES_PER_BYTE, seconds)


def propose(source: AttentionSource, text: str, max_tokens: int) -> Proposal:
    """What patching opens on: a swap of ``text`` (:func:`propose_swap`), else the built-in example pair."""
    return propose_swap(source, text, max_tokens) or example_pair(source, max_tokens)
